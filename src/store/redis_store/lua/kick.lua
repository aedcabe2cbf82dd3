-- kick: ARGV[3] bound -> the number kicked (buried jobs if any, else delayed ones)
local T, G, tube, origin = tube_keys(1), ns_keys(8), ARGV[1], ARGV[2]
local bound = tonumber(ARGV[3])
if bound < 1 then return 0 end
local ids = redis.call('ZRANGE', T.buried, 0, bound - 1)
if #ids == 0 then ids = redis.call('ZRANGE', T.delayed, 0, bound - 1) end
local now = now_us()
for _, m in ipairs(ids) do
  local id = id_of(m)
  to_ready(T, G, id, get_job(T, id), KICKS, now)
end
if #ids > 0 then
  wake(origin, tube)
end
return #ids
