-- kick: ARGV[3] the most jobs to kick in this call (at least 1), ARGV[4] the set to kick
-- from: 'buried', 'delayed', or '' for buried jobs if any, else delayed ones (a kick
-- that takes several calls names the set its first call chose, so it never mixes
-- them), ARGV[5] the retention argument (see RET)
-- -> {the number kicked, the set they came from}
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local bound, set = tonumber(ARGV[3]), ARGV[4]
if set == '' then
  set = 'buried'
  if redis.call('ZCARD', T.buried) == 0 then set = 'delayed' end
end
local ids = redis.call('ZRANGE', T[set], 0, bound - 1)
local now = now_us()
RET = ret_of(ARGV[5], now)
for _, m in ipairs(ids) do
  local id = id_of(m)
  local j = id and get_job(tube, id)
  if j then
    if RET then note(id, 'k', '0') end
    to_ready(T, G, id, j, KICKS, now)
  else
    -- Lost its meta in Redis (evicted?): dropped, as a tick does (counted as kicked,
    -- so a chunked kick's count still tells when its set is empty).
    drop_damaged(tube, T[set], m, id)
  end
end
if #ids > 0 then
  wake(origin, tube)
end
return { #ids, set }
