-- Make sure the namespace has a generation (ARGV[3], a fresh random token, unless
-- another instance made one first: it is then adopted) and its `default` tube.
-- Called with the empty generation, so the prelude lets it through.
-- -> {the namespace's generation} (the clock is read apart: RedisStore::read_clock)
local tube = ARGV[1]
redis.call('SET', G.generation, ARGV[3], 'NX')
ensure_tube(G, tube)
return { redis.call('GET', G.generation) }
