-- pause-tube: ARGV[3] the pause (us; a zero pause arrives as 1 us, "resume now", which
-- ends through the path that ends any pause) -> 1 paused, 0 no such tube
local T, tube = tube_keys(0, 1), ARGV[1]
if redis.call('HEXISTS', G.tubepos, tube) == 0 then return 0 end
local pause = tonumber(ARGV[3])
redis.call('HSET', T.meta, 'pause', pause, 'pause_until', now_us() + pause)
redis.call('HINCRBY', T.meta, 'cmd_pause', '1')
reschedule(T, G, tube)
return 1
