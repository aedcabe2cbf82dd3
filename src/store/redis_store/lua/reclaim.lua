-- Return to ready the jobs in this tube reserved under ARGV[3], the owner token of one
-- reserve attempt whose answer was lost (Redis timed out, then ran it anyway): nobody
-- was told of that reservation, so it is undone, and not counted (and the time it
-- became ready is kept: as far as anyone knows it never left ready).
-- -> the number returned
local T, G, tube, origin = tube_keys(1), ns_keys(8), ARGV[1], ARGV[2]
local owner = ARGV[3]
local n = 0
for _, m in ipairs(redis.call('ZRANGE', T.reserved, 0, -1)) do
  local id = id_of(m)
  local j = get_job(T, id)
  if j and j[OWNER] == owner then
    detach(T, id, j)
    j[RESERVES] = math.max(j[RESERVES] - 1, 0)
    attach(T, G, id, j, 'ready')
    put_job(T, id, j)
    n = n + 1
  end
end
if n > 0 then
  wake(origin, tube)
end
return n
