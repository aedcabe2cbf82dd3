-- A connection closed: its reservations go back to ready and its tube references go,
-- in one step, so no other connection's command sees half of it.
-- KEYS[1..7] the namespace, KEYS[8] this instance's reference hash, then 7 keys per tube.
-- ARGV[1] origin, ARGV[2] tube names joined by '\n' (tube i = key group i), ARGV[3] the
-- number of jobs J, then J triples (id, owner, tube index), then references as pairs
-- (kind, tube index) in the order they are dropped.
-- -> the indexes of tubes that gained ready jobs
local G, refs, origin = ns_keys(1), KEYS[8], ARGV[1]
local names = {}
for name in string.gmatch(ARGV[2], '[^\n]+') do names[#names + 1] = name end
local function tube(i) return tube_keys(9 + (i - 1) * 7), names[i] end
local woken, seen = {}, {}
local n_jobs = tonumber(ARGV[3])
local now = n_jobs > 0 and now_us()
local a = 4
for _ = 1, n_jobs do
  local id, owner, i = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local T, name = tube(i)
  local j = get_job(T, id)
  if j and j[STATE] == 'reserved' and j[OWNER] == owner then
    to_ready(T, G, id, j, nil, now)
    if not seen[i] then
      seen[i] = true
      woken[#woken + 1] = i
      wake(origin, name)
    end
  end
end
while a < #ARGV do
  local kind, i = ARGV[a], tonumber(ARGV[a + 1])
  a = a + 2
  local T, name = tube(i)
  local field = kind .. ':' .. name
  local cur = tonumber(redis.call('HGET', refs, field) or '0')
  if cur > 0 then
    if cur == 1 then redis.call('HDEL', refs, field) else redis.call('HSET', refs, field, cur - 1) end
    local count = tonumber(redis.call('HGET', T.meta, kind) or '0')
    redis.call('HSET', T.meta, kind, math.max(count - 1, 0))
    maybe_gc(T, G, name)
  end
end
return woken
