-- Make sure the namespace has a generation (ARGV[3], a fresh random token, unless
-- another instance made one first: it is then adopted) and its `default` tube; a
-- namespace made here that never held a job gets the mark that no large body was
-- ever written (see `bodies_small`).
-- Called with the empty generation, so the prelude lets it through.
-- ARGV[4]: the key layout this instance reads (src/redis/schema/mod.rs' VERSION). A
-- namespace whose `{P}:schema` names another (a later version upgraded it, and changed
-- the generation to stop the instances that would misread it) is not joined: LAYOUT,
-- nothing written. No `{P}:schema` (Redis lost the namespace) is joined.
-- -> {the namespace's generation} (the clock is read apart: RedisStore::read_clock)
local tube = ARGV[1]
local layout = redis.call('GET', G.tag .. ':schema')
if layout and layout ~= ARGV[4] then
  return redis.error_reply('LAYOUT the namespace has key layout ' .. layout ..
    '; this instance reads layout ' .. ARGV[4])
end
if redis.call('SET', G.generation, ARGV[3], 'NX') and redis.call('EXISTS', G.ids) == 0 then
  redis.call('SET', G.small, '1')
end
ensure_tube(G, tube)
return { redis.call('GET', G.generation) }
