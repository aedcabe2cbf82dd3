-- pause-tube: ARGV[3] delay (s) -> 0 no such tube, else the pause's end
-- A zero pause is 1 us: "resume now", through the path that ends any pause.
local T, G, tube = tube_keys(1), ns_keys(8), ARGV[1]
if redis.call('HEXISTS', G.tubepos, tube) == 0 then return 0 end
local pause = math.max(tonumber(ARGV[3]) * 1000000, 1)
local until_ = now_us() + pause
redis.call('HSET', T.meta, 'pause', pause, 'pause_until', until_)
redis.call('HINCRBY', T.meta, 'cmd_pause', '1')
reschedule(T, G, tube)
return until_
