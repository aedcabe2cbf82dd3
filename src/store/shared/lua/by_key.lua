-- by_key: a command by key in one tube. ARGV[3] key, ARGV[4] op ('find', 'delete',
-- 'kick', 'bury', 'retime'), ARGV[5] the caller's owner-token prefix (its own
-- reservations), ARGV[6] the bury priority or the retime delay (ms), ARGV[7] the most
-- dedupe windows open at once, ARGV[8] the retention argument (see RET) -> {what, id,
-- state}: 'not_found', 'found' (state, or 'DELETED' inside its window), 'done',
-- 'conflict' (state). O(1) in the tube's size.
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local op, n = ARGV[4], tonumber(ARGV[6])
local now = now_us()
RET = ret_of(ARGV[8], now)
local id, state, j = key_lookup(T, G, tube, ARGV[3], now)
if not id then return { 'not_found', '', '' } end
if op == 'find' then return { 'found', id, state } end
if state == 'DELETED' then return { 'not_found', '', '' } end
local mine = state == 'RESERVED' and string.sub(j[OWNER], 1, #ARGV[5]) == ARGV[5]
if op == 'delete' then
  if state == 'RESERVED' and not mine then return { 'not_found', '', '' } end
  delete_job(T, G, tube, id, j, true, tonumber(ARGV[7]), now)
  maybe_gc(T, G, tube)
elseif op == 'kick' then
  if state ~= 'BURIED' and state ~= 'DELAYED' then return { 'not_found', '', '' } end
  if RET then note(id, 'k', '0') end
  to_ready(T, G, id, j, KICKS)
  wake(origin, tube)
elseif op == 'bury' then
  if state == 'BURIED' or (state == 'RESERVED' and not mine) then
    return { 'conflict', id, state }
  end
  detach(T, id, j)
  j[PRI], j[BURIES] = n, j[BURIES] + 1
  attach(T, G, id, j, 'buried')
  put_job(id, j)
  if RET then note(id, 'b', RET.conn) end
elseif op == 'retime' then
  if state ~= 'READY' and state ~= 'DELAYED' then return { 'conflict', id, state } end
  detach(T, id, j)
  set_times(j, n, ttr_ms(j))
  place(T, G, tube, origin, id, j, n, now)
  if RET then note(id, 'e', RET.conn) end
end
return { 'done', id, '' }
