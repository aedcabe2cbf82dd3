-- many: several calls of put, reserve, delete and delete_job, made by this instance's
-- connections while its earlier calls were in flight (scripts/combine.rs), run one
-- after another in one call: each exactly as its own script runs it (`put_op`,
-- `reserve_op`, `delete_op`, `delete_job_op`), so the call is the same as those calls
-- sent in this order. What a call pays once (the EVALSHA, the generation check, TIME,
-- SHARDNUMSUB) is paid once here.
-- KEYS: the namespace's keys, then each operation's keys (as its own call passes them
-- after the namespace's), in order. ARGV, for each operation in order: its script's
-- name, how many keys it has, how many arguments, then its arguments (its own call's
-- ARGV after the generation).
-- -> each operation's reply in order (nil as false, an error reply as an error).
-- The puts' ids are taken from the counter in one INCRBY (a put of a large body has
-- its id already: its a[8]), and the namespace's total_jobs counts them in one command,
-- written before the call returns.
local puts, i = 0, 1
while i <= #ARGV do
  local nargs = tonumber(ARGV[i + 2])
  if ARGV[i] == 'put' and nargs < 8 then puts = puts + 1 end
  i = i + 3 + nargs
end
take_ids(G, puts)
PUTS_UNCOUNTED = 0
local out, k = {}, N_NS_KEYS + 1
i = 1
while i <= #ARGV do
  local name, nkeys, nargs = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local a = { unpack(ARGV, i + 3, i + 2 + nargs) }
  local r
  if name == 'put' then
    r = put_op(k, a)
  elseif name == 'reserve' then
    r = reserve_op(k, a)
  elseif name == 'delete' then
    r = delete_op(k, a)
  elseif name == 'delete_job' then
    r = delete_job_op(a)
  else
    r = redis.error_reply('ERR many: no operation ' .. tostring(name))
  end
  -- A nil would end the reply's array there.
  if r == nil then r = false end
  out[#out + 1] = r
  k, i = k + nkeys, i + 3 + nargs
end
if PUTS_UNCOUNTED > 0 then redis.call('HINCRBY', G.stats, 'total_jobs', PUTS_UNCOUNTED) end
return out
