-- Make sure the namespace has its `default` tube. -> Redis time (us)
local tube = ARGV[1]
ensure_tube(G, tube)
return now_us()
