-- The operator API's change in place of one job, keeping its id and counters.
-- KEYS: the job's tube, then (a move) the tube it goes to. ARGV[1] the wake-up origin,
-- ARGV[2] the job's tube, ARGV[3] id, ARGV[4] the change (move, pri, delay, bury),
-- ARGV[5] its value (the tube, the priority, the delay in s), ARGV[6] the states that
-- take it (",ready,delayed," -- the caller's one definition), ARGV[7] the retention
-- argument (see RET).
-- -> {'not_found'} | {'conflict', state} | {'done', ready (1: ready now), entry}
local T, origin, tube, id, op, v = tube_keys(0, 1), ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local j = get_job(tube, id)
if not j then return { 'not_found' } end
if not string.find(ARGV[6], ',' .. j[STATE] .. ',', 1, true) then return { 'conflict', j[STATE] } end
local now = now_us()
RET = ret_of(ARGV[7], now)
if op == 'pri' then
  -- A ready job takes its new place (its ready time kept); the others' place does not
  -- depend on it.
  j[PRI] = tonumber(v)
  if j[STATE] == 'ready' then redis.call('ZADD', T.ready, j[PRI], id20(id)) end
  put_job(id, j)
elseif op == 'delay' then
  local secs = tonumber(v)
  set_times(j, secs * 1000, ttr_ms(j))
  if secs > 0 then
    detach(T, id, j)
    local due = now + secs * 1000000
    attach(T, G, id, j, 'delayed', due)
    put_job(id, j)
    due_by(G, tube, due)
  elseif j[STATE] == 'delayed' then
    to_ready(T, G, id, j)
  else
    put_job(id, j)
  end
elseif op == 'bury' then
  detach(T, id, j)
  j[BURIES] = j[BURIES] + 1
  attach(T, G, id, j, 'buried')
  put_job(id, j)
elseif op == 'move' and v ~= tube then
  -- Same state in the other tube: a ready job keeps its ready time, a delayed one its
  -- due time, a buried one goes to the end of the other tube's buried FIFO. Its hash
  -- names its new tube; the body stays where it is.
  local D = tube_keys(0, 2)
  if not has_body(id) then
    return redis.error_reply('DAMAGED job ' .. id .. ' in tube ' .. tube .. ' lost its body in Redis')
  end
  detach(T, id, j)
  -- A keyed job leaves its key behind, freed (docs/EXTENSIONS.md, Keys). A dead
  -- letter stays one (buried still): its fields before DEAD stay filled.
  if j[KEY] then
    if j[KEY] ~= '' and redis.call('HGET', T.keys, j[KEY]) == id then
      redis.call('HDEL', T.keys, j[KEY])
    end
    j[KEY], j[WINDOW_MS] = nil, nil
    if j[DEAD] then j[KEY], j[WINDOW_MS] = '', 0 end
  end
  ensure_tube(G, v)
  local state, due = j[STATE], j[DUE]
  attach(D, G, id, j, state, due)
  write_job(id, v, j)
  if state == 'delayed' then due_by(G, v, due) end
  maybe_gc(T, G, tube)
  T, tube = D, v
end
if RET then note(id, 'e', '0') end
local ready = 0
if j[STATE] == 'ready' then
  ready = 1
  wake(origin, tube)
end
return { 'done', ready, admin_entry(id, j, now) }
