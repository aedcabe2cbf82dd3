-- A list command (delete-batch, release-batch, touch-batch, bury-batch): each id in
-- order, exactly as delete.lua, release.lua, touch.lua and bury.lua do it, in one call.
-- One key group per tube the ids are in (the caller resolved each id's tube: its own
-- reservation, or its job's hash). ARGV[1] origin, ARGV[2] op (delete, release, touch,
-- bury), ARGV[3] pri, ARGV[4] delay (ms), ARGV[5] tube names joined by '\n' (tube i =
-- key group i), ARGV[6] the most dedupe windows open at once, ARGV[7] the tubes'
-- policies (a release's; see `rules_of`), ARGV[8] for each triple in order where in its
-- backoff's jitter a release lands, joined by ' ' ('' when no rule has jitter: 0),
-- ARGV[9] the retention argument (see RET), then triples (id, owner token or '', tube
-- index). A deleted job's key window opens as in delete.lua. A delete-batch is not
-- counted in cmd_delete (an extension verb, docs/EXTENSIONS.md's rule 3).
-- -> {now, then per triple: 0 missing, 1 done, or (touch) the new deadline}
local origin, op = ARGV[1], ARGV[2]
local pri, delay = tonumber(ARGV[3]), tonumber(ARGV[4])
local windows = tonumber(ARGV[6])
local names = {}
for name in string.gmatch(ARGV[5], '[^\n]+') do names[#names + 1] = name end
local rules = op == 'release' and rules_of(ARGV[7])
local spreads = {}
for x in string.gmatch(ARGV[8], '%S+') do spreads[#spreads + 1] = tonumber(x) end
local now = now_us()
RET = ret_of(ARGV[9], now)
local out, woken, gone = { now }, {}, {}
for a = 10, #ARGV, 3 do
  local id, owner, i = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  local T, name = tube_keys(0, i), names[i]
  local j = get_job(name, id)
  local mine = j and j[STATE] == 'reserved' and j[OWNER] == owner
  local r = 0
  if op == 'delete' then
    if j and (j[STATE] ~= 'reserved' or mine) then
      delete_job(T, G, name, id, j, true, windows, now)
      gone[i] = true
      r = 1
    end
  elseif mine and op == 'touch' then
    r = now + ttr_ms(j) * 1000
    detach(T, id, j)
    attach(T, G, id, j, 'reserved', r, owner)
    put_job(id, j)
  elseif mine and op == 'bury' then
    detach(T, id, j)
    j[PRI], j[BURIES] = pri, j[BURIES] + 1
    attach(T, G, id, j, 'buried')
    put_job(id, j)
    if RET then note(id, 'b', RET.conn) end
    r = 1
  elseif mine and op == 'release' then
    local rule = rules and rules[i]
    local placed = release_job(T, G, name, origin, id, j, pri, delay, rule,
      spreads[(a - 7) / 3] or 0, now, woken[i])
    if placed == 0 then woken[i] = true end
    r = 1
  end
  out[#out + 1] = r
end
for i in pairs(gone) do maybe_gc(tube_keys(0, i), G, names[i]) end
return out
