-- reserve across watched tubes: the reserve group of each watched tube (the keys a
-- reserve may touch), in ARGV order; ARGV[1] origin (unused), ARGV[2] owner, ARGV[3..]
-- the tube names.
-- Picks the ready job with the least (pri, id) among tubes that are not paused. A job
-- that lost its meta or body is dropped and the call answers a DAMAGED error.
-- -> nil, or {id, body (its length when large: see body_for_reply), deadline, tube index
-- (1-based), now, waited (us, -1 unknown)}
local owner = ARGV[2]
local now = now_us()
local function first_key(i)
  return N_NS_KEYS + (i - 1) * N_RESERVE_KEYS + 1
end
local best_i, best_m = nil, nil
if #ARGV == 3 then
  -- One watched tube (the common case): its head is taken at once, and put back if the
  -- tube is paused; one command fewer than looking first and taking after.
  local T = reserve_group(first_key(1))
  local head = redis.call('ZPOPMIN', T.ready)
  if not head[1] then return nil end
  if paused(T, now) then
    redis.call('ZADD', T.ready, head[2], head[1])
    return nil
  end
  best_i, best_m = 1, head[1]
else
  local best_pri = nil
  for i = 1, #ARGV - 2 do
    -- Most watched tubes are empty: look at the head first, the pause only if needed.
    local head = redis.call('ZRANGE', KEYS[first_key(i) + RESERVE_READY], 0, 0, 'WITHSCORES')
    if head[1] then
      local pri = tonumber(head[2])
      if (not best_i or pri < best_pri or (pri == best_pri and head[1] < best_m))
          and not paused(reserve_group(first_key(i)), now) then
        best_i, best_pri, best_m = i, pri, head[1]
      end
    end
  end
  if not best_i then return nil end
  redis.call('ZREM', KEYS[first_key(best_i) + RESERVE_READY], best_m)
end
-- The job is out of the ready set now, whatever follows.
local T = reserve_group(first_key(best_i))
local id = id_of(best_m)
local j = id and get_job(T, id)
local body = id and body_for_reply(T, id)
if not j or not body then
  drop_damaged(T, G, T.ready, best_m, id)
  return redis.error_reply('DAMAGED job ' .. tostring(id) .. ' in tube ' .. ARGV[best_i + 2]
    .. ' lost its ' .. (j and 'body' or 'meta') .. ' in Redis (evicted?): dropped, not served')
end
local w = waited(j, now)
local deadline = now + ttr_ms(j) * 1000
j[RESERVES] = j[RESERVES] + 1
attach(T, G, id, j, 'reserved', deadline, owner)
put_job(T, id, j)
due_by(G, ARGV[best_i + 2], deadline + 1)
return { id, body, deadline, best_i, now, w }
