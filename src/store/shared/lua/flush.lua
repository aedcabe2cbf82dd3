-- One step of a flush (flush-tube, flush-buried): delete at most ARGV[4] jobs of the
-- tube in the states named, each with an id at most the flush's bound, without counting
-- cmd_delete. ARGV[1] tube, ARGV[2] origin (unused), ARGV[3] the states (ready,
-- delayed, reserved, buried, joined by ','), ARGV[4] the most jobs, ARGV[5] the highest
-- id the flush takes ('' on its first step: the highest id made so far). A tube that
-- does not exist is not made. Members put after the flush began are skipped (each step
-- looks at them again: a step costs what it deletes plus those). A flushed job did not
-- run: its key is freed at once, with no window. ARGV[6] the retention argument (see
-- RET): each job's record is retained, its last event a flush.
-- -> {deleted, the highest id taken, the reserved ids deleted}
local T, tube = tube_keys(0, 1), ARGV[1]
local max = tonumber(ARGV[4])
local upto = tonumber(ARGV[5] ~= '' and ARGV[5] or (redis.call('GET', G.ids) or '0'))
local deleted, held = 0, {}
local keyed = redis.call('EXISTS', T.keys) == 1
RET = ret_of(ARGV[6])
for state in string.gmatch(ARGV[3], '[^,]+') do
  local set = T[STATE_SET[state]]
  local from = 0
  while deleted < max do
    local members = redis.call('ZRANGE', set, from, from + max - 1)
    if not members[1] then break end
    for _, m in ipairs(members) do
      local id = id_of(m)
      if deleted < max and id and tonumber(id) <= upto then
        if keyed or RET then
          local j = get_job(tube, id)
          if j and RET then retain(tube, id, j, 'f', '0') end
          if j and keyed then end_key(T, G, tube, id, j, 0, false, 0) end
        end
        redis.call('ZREM', set, m)
        forget_job(id)
        if state == 'reserved' then held[#held + 1] = tonumber(id) end
        deleted = deleted + 1
      else
        from = from + 1
      end
    end
  end
end
if deleted > 0 then maybe_gc(T, G, tube) end
return { deleted, upto, held }
