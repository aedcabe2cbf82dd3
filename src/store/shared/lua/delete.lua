-- delete: ARGV[3] id, ARGV[4] owner -> 1 deleted, 0 not found (or held by another)
local T, tube = tube_keys(0, 1), ARGV[1]
local id = ARGV[3]
local j = get_job(T, id)
if not j then return 0 end
if j[STATE] == 'reserved' and j[OWNER] ~= ARGV[4] then return 0 end
detach(T, id, j)
redis.call('HDEL', T.jobs, id)
redis.call('HDEL', T.bodies, id)
redis.call('HDEL', G.index, id)
redis.call('HINCRBY', T.meta, 'cmd_delete', '1')
maybe_gc(T, G, tube)
return 1
