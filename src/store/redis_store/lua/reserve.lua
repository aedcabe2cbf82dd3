-- reserve across watched tubes: KEYS[1..7] the namespace, then per tube its ready key
-- (the others share its `{...}:` hash-tag part and are derived from it for the one tube
-- chosen: a worker watching many tubes would otherwise hand over seven keys for each);
-- ARGV[1] origin (unused), ARGV[2] owner, ARGV[3..] the tube names.
-- Picks the ready job with the least (pri, id) among tubes that are not paused.
-- -> nil, or {id, body, deadline, tube index (1-based), now, waited (us, -1 unknown)}
local G, owner = ns_keys(1), ARGV[2]
local now = now_us()

local function keys_of(ready)
  local base = string.sub(ready, 1, -6)
  return { ready = ready, delayed = base .. 'delayed', reserved = base .. 'reserved',
           buried = base .. 'buried', jobs = base .. 'jobs', bodies = base .. 'bodies',
           meta = base .. 'meta' }
end

local best_i, best_pri, best_m = nil, nil, nil
for i = 3, #ARGV do
  local ready = KEYS[8 + (i - 3)]
  -- Most watched tubes are empty: look at the head first, the pause only if needed.
  local head = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
  if head[1] then
    local pri = tonumber(head[2])
    if (not best_i or pri < best_pri or (pri == best_pri and head[1] < best_m))
        and not paused(keys_of(ready), now) then
      best_i, best_pri, best_m = i - 2, pri, head[1]
    end
  end
end
if not best_i then return nil end
local T = keys_of(KEYS[8 + (best_i - 1)])
local id = id_of(best_m)
local j = get_job(T, id)
local w = waited(j, now)
detach(T, id, j)
local deadline = now + j[TTR] * 1000000
j[RESERVES] = j[RESERVES] + 1
attach(T, G, id, j, 'reserved', deadline, owner)
put_job(T, id, j)
due_by(G, ARGV[best_i + 2], deadline + 1)
return { id, redis.call('HGET', T.bodies, id), deadline, best_i, now, w }
