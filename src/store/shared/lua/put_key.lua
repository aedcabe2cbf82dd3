-- put_key: a keyed put (docs/EXTENSIONS.md, Keys). ARGV[3] pri, ARGV[4] delay (ms),
-- ARGV[5] ttr (ms), ARGV[6] body, ARGV[7] key, ARGV[8] mode ('dedupe' or 'replace'),
-- ARGV[9] window (ms), ARGV[10] the retention argument (see RET) -> {what, id, state}:
-- 'inserted' (state ''), 'existing', 'replaced' (the state after it) or 'conflict',
-- with the key's job's id and state. The lookup, the state check and the write are one
-- script: O(1) in the tube's size.
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local pri, delay, ttr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local key, window = ARGV[7], tonumber(ARGV[9])
local now = now_us()
RET = ret_of(ARGV[10], now)
local id, state, j = key_lookup(T, G, tube, key, now)
if id then
  if ARGV[8] == 'dedupe' then return { 'existing', id, state } end
  if state ~= 'READY' and state ~= 'DELAYED' then return { 'conflict', id, state } end
  -- Replaced in place: same id, counters and age; its place by (pri, id) anew.
  detach(T, id, j)
  j[PRI], j[WINDOW_MS] = pri, window
  set_times(j, delay, ttr)
  set_body(id, ARGV[6])
  place(T, G, tube, origin, id, j, delay, now)
  if RET then note(id, 'e', '0') end
  if delay > 0 then return { 'replaced', id, 'DELAYED' } end
  return { 'replaced', id, 'READY' }
end
id = new_id(G)
put_new(T, G, tube, origin, id, ARGV[6], pri, delay, ttr, now, key, window)
return { 'inserted', id, '' }
