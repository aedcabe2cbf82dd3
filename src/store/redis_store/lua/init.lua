-- Make sure the namespace has its `default` tube. -> Redis time (us)
local G, tube = ns_keys(8), ARGV[1]
ensure_tube(G, tube)
return now_us()
