-- ahead: the timer's sweep of the large bodies written ahead of their jobs (large.rs;
-- G.ahead). Of those written more than ARGV[1] ms ago, at most ARGV[2] (the oldest)
-- leave the set: a body whose job was never made (no meta: its put failed, or its
-- writer died before the put) goes with its key (`drop_ahead`); one whose job was made
-- stays (the put's own ZREM normally takes it out of the set).
-- -> {how many left the set (ARGV[2] of them: more may be waiting), bodies dropped}
local before = math.floor(now_us() / 1000) - tonumber(ARGV[1])
local old = redis.call('ZRANGEBYSCORE', G.ahead, '-inf', string.format('%d', before),
  'LIMIT', 0, tonumber(ARGV[2]))
local dropped = 0
for _, id in ipairs(old) do
  if drop_ahead(id) then dropped = dropped + 1 end
end
if old[1] then redis.call('ZREM', G.ahead, unpack(old)) end
return { #old, dropped }
