-- Drop the tube references of an instance that stopped heartbeating, atomically with
-- the check that it is still dead (so one that comes back is never reaped).
-- Own keys: 1 the instance registry, 2 the dead instance's reference hash; then one
-- key group per tube named in ARGV[2..].
-- ARGV[1] the instance. -> 1 reaped, 0 alive after all, -1 the hash names a tube not
-- given (read it again and retry)
local registry, refs, instance = own_key(1), own_key(2), ARGV[1]
local score = redis.call('ZSCORE', registry, instance)
if score and tonumber(score) > now_us() then return 0 end
local index = {}
for i = 2, #ARGV do index[ARGV[i]] = i - 1 end
local fields = redis.call('HGETALL', refs)
for i = 1, #fields, 2 do
  local _, tube = string.match(fields[i], '^(%a+):(.*)$')
  if not tube or not index[tube] then return -1 end
end
for i = 1, #fields, 2 do
  local kind, tube = string.match(fields[i], '^(%a+):(.*)$')
  local T = tube_keys(2, index[tube])
  local count = tonumber(redis.call('HGET', T.meta, kind) or '0')
  redis.call('HSET', T.meta, kind, math.max(count - tonumber(fields[i + 1]), 0))
  maybe_gc(T, G, tube)
end
redis.call('DEL', refs)
redis.call('ZREM', registry, instance)
return 1
