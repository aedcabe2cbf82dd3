-- release: ARGV[3] id, ARGV[4] owner, ARGV[5] pri, ARGV[6] delay (s) -> 1 or 0
local T, G, tube, channel = tube_keys(1), ns_keys(8), ARGV[1], ARGV[2]
local id = tonumber(ARGV[3])
local j = get_job(T, id)
if not j or j[STATE] ~= 'reserved' or j[OWNER] ~= ARGV[4] then return 0 end
local delay = tonumber(ARGV[6])
detach(T, G, id, j)
j[PRI], j[DELAY], j[RELEASES] = tonumber(ARGV[5]), delay, j[RELEASES] + 1
if delay > 0 then
  attach(T, G, id, j, 'delayed', now_us() + delay * 1000000)
else
  j[READY] = now_us()
  attach(T, G, id, j, 'ready')
  wake(channel, tube)
end
put_job(T, id, j)
reschedule(T, G, tube)
return 1
