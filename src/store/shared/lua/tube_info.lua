-- stats-tube figures: ARGV[3] the urgent threshold (a ready job with a priority below it
-- is urgent) -> nil (no such tube) or
-- {urgent, ready, reserved, delayed, buried, total_jobs, using, watching, cmd_delete,
--  cmd_pause, pause, pause_until, now}
local T, tube = tube_keys(0, 1), ARGV[1]
if redis.call('HEXISTS', G.tubepos, tube) == 0 then return nil end
local m = redis.call('HMGET', T.meta, 'total_jobs', 'using', 'watching', 'cmd_delete',
  'cmd_pause', 'pause', 'pause_until')
local out = { redis.call('ZCOUNT', T.ready, '-inf', '(' .. ARGV[3]), redis.call('ZCARD', T.ready),
  redis.call('ZCARD', T.reserved), redis.call('ZCARD', T.delayed), redis.call('ZCARD', T.buried) }
for i = 1, 7 do out[#out + 1] = tonumber(m[i] or '0') end
out[#out + 1] = now_us()
return out
