"""The attention engine: the systolic int8 array and the vector unit around it."""
