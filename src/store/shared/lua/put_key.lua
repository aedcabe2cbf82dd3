-- put_key: a keyed put (docs/EXTENSIONS.md, Keys). ARGV[3] pri, ARGV[4] delay (ms),
-- ARGV[5] ttr (ms), ARGV[6] body, ARGV[7] key, ARGV[8] mode ('dedupe' or 'replace'),
-- ARGV[9] window (ms) -> {what, id, state}: 'inserted' (state ''), 'existing',
-- 'replaced' (the state after it) or 'conflict', with the key's job's id and state.
-- The lookup, the state check and the write are one script: O(1) in the tube's size.
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local pri, delay, ttr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local key, window = ARGV[7], tonumber(ARGV[9])
local now = now_us()
local id, state, j = key_lookup(T, G, tube, key, now)
if id then
  if ARGV[8] == 'dedupe' then return { 'existing', id, state } end
  if state ~= 'READY' and state ~= 'DELAYED' then return { 'conflict', id, state } end
  -- Replaced in place: same id, counters and age; its place by (pri, id) anew.
  detach(T, id, j)
  j[PRI], j[WINDOW_MS] = pri, window
  set_times(j, delay, ttr)
  redis.call('HSET', T.bodies, id, ARGV[6])
  place(T, G, tube, origin, id, j, delay, now)
  if delay > 0 then return { 'replaced', id, 'DELAYED' } end
  return { 'replaced', id, 'READY' }
end
local n = redis.call('INCR', G.ids)
-- A Lua number is a double: past 2^53 only the counter's own text is exact.
id = n < 9007199254740992 and string.format('%d', n) or redis.call('GET', G.ids)
redis.call('HSET', T.bodies, id, ARGV[6])
if redis.call('HINCRBY', T.meta, 'total_jobs', '1') == 1 then ensure_tube(G, tube) end
j = { pri, 0, 0, now, '', 0, '', 0, 0, 0, 0, 0, 0, now, 0, 0, key, window }
set_times(j, delay, ttr)
redis.call('HSET', G.index, id, tube)
redis.call('HINCRBY', G.stats, 'total_jobs', '1')
redis.call('HSET', T.keys, key, id)
place(T, G, tube, origin, id, j, delay, now)
return { 'inserted', id, '' }
