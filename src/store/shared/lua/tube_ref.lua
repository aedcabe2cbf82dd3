-- A connection starts or stops using or watching a tube, or an instance restores its
-- references after it was taken for dead.
-- Own key 1: this instance's reference hash.
-- ARGV[3] 'using' or 'watching', ARGV[4] an amount, ARGV[5] 'add' (a change) or 'set'
-- (this instance's whole count for the tube).
-- The shared count moves only by what this instance's own count really moved, and
-- neither goes below zero: an instance whose references were dropped while it was
-- stalled cannot take away other instances' references.
local refs, T, tube = own_key(1), tube_keys(1, 1), ARGV[1]
local kind, amount, mode = ARGV[3], tonumber(ARGV[4]), ARGV[5]
local field = kind .. ':' .. tube
local cur = tonumber(redis.call('HGET', refs, field) or '0')
local new = amount
if mode == 'add' then new = cur + amount end
if new < 0 then new = 0 end
if new == 0 then
  redis.call('HDEL', refs, field)
else
  redis.call('HSET', refs, field, new)
end
local applied = new - cur
if applied > 0 then ensure_tube(G, tube) end
if applied ~= 0 then
  local count = tonumber(redis.call('HGET', T.meta, kind) or '0')
  redis.call('HSET', T.meta, kind, math.max(count + applied, 0))
end
-- Also at no reference left when Redis had already lost this instance's count (it was
-- taken for dead): see close.lua.
if applied < 0 or new == 0 then maybe_gc(T, G, tube) end
return applied
