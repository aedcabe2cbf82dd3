-- A connection closed: its reservations go back to ready and its tube references go. A
-- close of a connection with many references takes several calls (the caller gives each
-- at most a chunk of jobs and references, jobs first); each call is one step. Own key
-- 1: this instance's reference hash; then one key group per tube. ARGV[1] origin,
-- ARGV[2] tube names joined by '\n' (tube i = key group i), ARGV[3] the tubes' policies
-- (see `rules_of`: a job's dead letter rule may bury it instead; '' for a reply given
-- back, which ends no reservation), ARGV[4] the retention argument (see RET: each job's
-- holder closed), ARGV[5] the number of jobs J, then J triples (id, owner, tube index),
-- then references as triples (kind, tube index, this instance's count after the close)
-- in the order they are dropped. The count is absolute (read when the call was queued),
-- so a restore of the references sent between two calls of one close is never undone
-- twice; the shared count moves by what this instance's own count really moved (as in
-- `tube_ref`).
-- -> the indexes of tubes that gained ready jobs
local refs, origin = own_key(1), ARGV[1]
local names = {}
for name in string.gmatch(ARGV[2], '[^\n]+') do names[#names + 1] = name end
local function tube(i) return tube_keys(1, i), names[i] end
local woken, seen = {}, {}
local rules = rules_of(ARGV[3])
local n_jobs = tonumber(ARGV[5])
local now = n_jobs > 0 and now_us()
RET = n_jobs > 0 and ret_of(ARGV[4], now)
local a = 6
for _ = 1, n_jobs do
  local id, owner, i = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local T, name = tube(i)
  local j = get_job(name, id)
  local held = j and j[STATE] == 'reserved' and j[OWNER] == owner
  if held and RET then note(id, 'c', conn_of(owner)) end
  if held and to_ready(T, G, id, j, nil, now, rules and rules[i]) then
    if not seen[i] then
      seen[i] = true
      woken[#woken + 1] = i
      wake(origin, name)
    end
  end
end
while a < #ARGV do
  local kind, i, left = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local T, name = tube(i)
  local field = kind .. ':' .. name
  local cur = tonumber(redis.call('HGET', refs, field) or '0')
  if left < cur then
    if left == 0 then redis.call('HDEL', refs, field) else redis.call('HSET', refs, field, left) end
    local count = tonumber(redis.call('HGET', T.meta, kind) or '0')
    redis.call('HSET', T.meta, kind, math.max(count - (cur - left), 0))
  end
  -- Also when Redis had already lost this instance's count (it was taken for dead): a
  -- delete skipped the tube's destruction while this connection referred to it (see
  -- `delete_found`), so its last reference's end decides.
  if left == 0 or left < cur then maybe_gc(T, G, name) end
end
return woken
