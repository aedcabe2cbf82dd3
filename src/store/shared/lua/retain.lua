-- retain: the retained set's upkeep and figures (store/retention.rs; see RET in the
-- prelude). ARGV[1] the retention argument: when on, records past the age bound (and
-- any over the count or bytes bound) are evicted first, at most RET_EVICT of each per
-- call. -> {records, accounted bytes, evicted by age} (the last: call again while it
-- is RET_EVICT).
RET = ret_of(ARGV[1])
local tag = string.match(KEYS[1], '^%b{}')
local gone = 0
if RET then gone = ret_trim() end
local bytes = tonumber(redis.call('GET', tag .. ':retained:bytes') or '0')
return { redis.call('ZCARD', tag .. ':retained'), bytes, gone }
