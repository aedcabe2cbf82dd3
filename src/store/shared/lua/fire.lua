-- fire: one tick of a schedule (store/schedule.rs; docs/REDIS.md, Schedules). Own key 1:
-- the cursor hash. ARGV[3] pri, ARGV[4] delay (ms), ARGV[5] ttr (ms), ARGV[6] body,
-- ARGV[7] key ('' for none), ARGV[8] its window (ms), ARGV[9] the schedule's name,
-- ARGV[10] the tick (ms), ARGV[11] ticks skipped before it, ARGV[12] the retention
-- argument (see RET) -> {'made', id},
-- {'deduped', id, state}, {'stale', last tick}, {'early'}, or {'bad', cursor text}.
-- The cursor check, the put and the cursor's advance are one script, so instances
-- firing the same tick at once are run one after the other by Redis: the first makes
-- the job, the others find the tick stale. A tick is made as put.lua / put_key.lua
-- make a job (`put_new`, `key_lookup`: a key always dedupes); bodies come only through
-- ARGV (the caller refuses a large one: no two-step put, no window between its steps).
local C, T, tube, origin = own_key(1), tube_keys(1, 1), ARGV[1], ARGV[2]
local name, tick, skipped = ARGV[9], ARGV[10], tonumber(ARGV[11])
local c, raw = cursor_get(C, name)
if not c then return { 'bad', raw } end
if not dec_gt(tick, c[1]) then return { 'stale', c[1] } end
local now = now_us()
RET = ret_of(ARGV[12], now)
-- One clock for every instance: a tick is due by Redis' time, 1 s of skew allowed.
if tonumber(tick) > math.floor(now / 1000) + 1000 then return { 'early' } end
local pri, delay, ttr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local key, window = ARGV[7], tonumber(ARGV[8])
local id, state = nil, nil
if key ~= '' then id, state = key_lookup(T, G, tube, key, now) end
if id then
  c[4] = dec_add(c[4], 1)
else
  id = new_id(G)
  if key == '' then key = nil end
  put_new(T, G, tube, origin, id, ARGV[6], pri, delay, ttr, now, key, window)
  c[3] = dec_add(c[3], 1)
end
c[1], c[2], c[5] = tick, id, dec_add(c[5], skipped)
redis.call('HSET', C, name, table.concat(c, ' '))
if state then return { 'deduped', id, state } end
return { 'made', id }
