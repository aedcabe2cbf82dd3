-- The operator API's listing of one tube's jobs in one state, in the order the server
-- takes them (the state's set: (score, member) order), after a cursor.
-- ARGV[3] the state, ARGV[4] the cursor's score ('' from the start), ARGV[5] its id,
-- ARGV[6] the most jobs to answer, ARGV[7] the most to look at, ARGV[8] '1' to keep
-- only jobs whose body holds ARGV[9], ARGV[10] the most body bytes to read for that.
-- -> {scanned, next score ('' when all are seen), next member, {entry...}}
-- Bounded: the cursor's place is found by a binary search over ranks (O(log^2 n)),
-- then at most ARGV[7] + 1 members are read from it, whatever the page's number.
local T, tube = tube_keys(0, 1), ARGV[1]
local set = STATE_SET[ARGV[3]]
if not set then return redis.error_reply('BAD_STATE no job state ' .. ARGV[3]) end
set = T[set]
local limit, scan = tonumber(ARGV[6]), tonumber(ARGV[7])
local filter, needle, budget = ARGV[8] == '1', ARGV[9], tonumber(ARGV[10])

-- The rank of the first member after (score, member): the members of a lower score,
-- then those of this score up to it (members are fixed-width ids, so string order is
-- id order). Found without the member: it may have left the set since.
local function rank_after(score, member)
  local lo = redis.call('ZCOUNT', set, '-inf', '(' .. score)
  local hi = lo + redis.call('ZCOUNT', set, score, score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if redis.call('ZRANGE', set, mid, mid)[1] > member then hi = mid else lo = mid + 1 end
  end
  return lo
end

local from = 0
if ARGV[4] ~= '' then from = rank_after(ARGV[4], id20(ARGV[5])) end
local want = scan
if not filter and limit < want then want = limit end
-- One more than can be looked at: whether a next page exists.
local found = redis.call('ZRANGE', set, from, from + want, 'WITHSCORES')
local now = now_us()
local out, scanned = {}, 0
for i = 1, #found, 2 do
  if #out >= limit or scanned >= want or budget <= 0 then
    return { scanned, found[i - 1], found[i - 2], out }
  end
  scanned = scanned + 1
  local id = id_of(found[i])
  local j = id and get_job(tube, id)
  if j then
    local keep = true
    if filter then
      local body = job_body(id) or ''
      budget = budget - #body
      keep = string.find(body, needle, 1, true) ~= nil
    end
    if keep then out[#out + 1] = admin_entry(id, j, now) end
  end
end
return { scanned, '', '', out }
