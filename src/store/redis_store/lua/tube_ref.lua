-- A connection starts or stops using or watching a tube.
-- KEYS[15] this instance's reference hash. ARGV[3] 'using' or 'watching', ARGV[4] +n/-n
-- Counts never go below zero (as in the memory store).
local T, G, tube = tube_keys(1), ns_keys(8), ARGV[1]
local field, delta = ARGV[3], tonumber(ARGV[4])
if delta > 0 then ensure_tube(G, tube) end
local count = tonumber(redis.call('HGET', T.meta, field) or '0')
redis.call('HSET', T.meta, field, math.max(count + delta, 0))
local mine = redis.call('HINCRBY', KEYS[15], field .. ':' .. tube, delta)
if mine <= 0 then redis.call('HDEL', KEYS[15], field .. ':' .. tube) end
if delta < 0 then maybe_gc(T, G, tube) end
return 1
