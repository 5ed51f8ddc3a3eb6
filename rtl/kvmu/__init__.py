"""The KV memory manager: block tables, near and far tiers behind one AXI4 master, prefetch
with stale-fetch drop."""
