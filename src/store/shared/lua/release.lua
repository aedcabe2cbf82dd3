-- release: ARGV[3] id, ARGV[4] owner, ARGV[5] pri, ARGV[6] delay (ms) -> 1 or 0
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local id = ARGV[3]
local j = get_job(T, id)
if not j or j[STATE] ~= 'reserved' or j[OWNER] ~= ARGV[4] then return 0 end
local delay = tonumber(ARGV[6])
detach(T, id, j)
j[PRI], j[RELEASES] = tonumber(ARGV[5]), j[RELEASES] + 1
set_times(j, delay, ttr_ms(j))
if delay > 0 then
  local due = now_us() + delay * 1000
  attach(T, G, id, j, 'delayed', due)
  due_by(G, tube, due)
else
  j[READY] = now_us()
  attach(T, G, id, j, 'ready')
  wake(origin, tube)
end
put_job(T, id, j)
return 1
