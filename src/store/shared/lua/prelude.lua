-- How this file must be written (scripts.rs keeps of it, per script, only what the
-- script's body uses; shake.rs cuts it by lines, not by parsing Lua):
-- - A top-level piece starts at a line with code at column 0. Every other line belongs
--   to the piece above: an indented line (a body, a continued expression), a line that
--   starts with `end` (alone or followed by a space), `else`/`elseif`, `)` or `}`. So
--   indent everything inside a function or a block, and never start a continued line
--   at column 0 (a `..` or an argument there would begin a new piece).
-- - Comment lines at column 0 and blank lines between two pieces go with the piece
--   below them (an indented comment stays in the piece it is in).
-- - A piece is a definition when its first code line is `local function NAME(` or
--   `local A[, B...] = ...` (the names before the first `=`, which may run over lines);
--   it is cut from a script unless the body, or a piece kept, names one of them as a
--   Lua identifier outside a whole-line comment. One definition per piece: no
--   `local a = 1; local b = 2` on one line. Every other piece (the generation check
--   below) is a statement, kept in every script, with all it names. scripts.rs may
--   replace a definition piece for one script (the layout's `ns_group`, CHECK_FIRST).
-- - A piece names only pieces above it (the order is kept, and the cut is one pass
--   from the bottom), so define a helper before its first use.
-- A prelude that breaks these rules is cut wrongly: a script Redis refuses to compile
-- (scripts.rs' every_script_loads_into_redis loads each into a redis-server), or one
-- that names what it lost (shake.rs' every_script_keeps_every_name_it_uses).
-- - As a Redis Function (scripts/library.rs) the pieces are made once, at FUNCTION LOAD,
--   and live across calls: a top-level variable that a call sets, or that is made of the
--   call's KEYS or ARGV, is the call's state and must be named in CALL_STATE there (set
--   again at each call's entry). scripts/tests.rs' every_name_a_call_changes_is_call_state
--   finds the ones a script assigns.
--
-- Shared by every redstalk script (prepended by scripts.rs, after the key layout that
-- src/redis/keys.rs generates: for each key group (tube, ns, reserve) its size N_TUBE_KEYS, each
-- key's offset TUBE_READY..., and tube_group(b) naming the keys from KEYS index b).
--
-- A tube's keys ({<prefix>}:t:<tube>:<name>; every key has the namespace's hash tag):
--   ready (zset pri/id20), delayed (zset due_us/id20), reserved (zset deadline_us/id20),
--   buried (zset seq/id20),
--   meta (hash: total_jobs, cmd_delete, cmd_pause, using, watching, pause, pause_until),
--   keys (hash key -> id: a keyed job's, or a deleted one's while its window is open).
-- The namespace's keys: ids (counter), seq (bury counter), stats (hash: total_jobs,
--   job_timeouts; how many jobs are in each state is counted from the sets),
--   due (zset tube -> next due time), tubes (list, the
--   reference's swap-remove order), tubepos (hash tube -> 0-based list position),
--   generation (the namespace's random token, see below), keywin (zset
--   "<tube>\n<key>" -> end of that key's dedupe window), ahead (zset id -> when its
--   large body was written ahead of its job, ms; see large.rs and `drop_ahead`), small
--   (a mark: no large body was ever written here; see `bodies_small`).
-- A job is one hash of its own, {<prefix>}:j:<id>: t its tube's name, m its meta
--   (msgpack, see PRI...), b its body (see `job_key` below). Scripts name it without
--   its being among the call's KEYS (a reserve cannot know the job it will take): it
--   has the namespace's tag, so it is in the slot of the declared keys.
--
-- KEYS of every call: the namespace's keys the script reads (G; scripts.rs passes only
-- those, and replaces the layout's ns_group to match), then the script's own keys (a fixed
-- number per script: `own_key`), then one group per tube the call names (`tube_keys`).
-- Single-tube scripts: one group; ARGV[1] the tube name, ARGV[2] the wake-up origin
-- (see `wake`).
-- Times are microseconds of the Redis clock (TIME), so every instance shares one clock.
-- Every loop is bounded by what the call passes (its keys, its arguments, or a chunk
-- size), so no call blocks Redis for long; a script with more to do says so.

local G = ns_group(1)

-- The namespace's generation (see namespace.rs): the caller's comes first in ARGV, the
-- script's own arguments after it; it is taken off, so every script numbers its
-- arguments from 1 (Redis lets a script change ARGV, unlike the global tables). A call
-- made for another generation than the namespace's -- Redis restarted empty or was
-- flushed since the caller joined it -- changes nothing, so no command of an old
-- connection can touch a job of a new namespace. Only `init`, which makes the
-- generation, passes the empty one.
local GEN = table.remove(ARGV, 1)

-- Whether no body of LARGE_BODY or more was ever written in the namespace (nil: not
-- read yet; see `bodies_small` below).
local SMALL = nil

-- Whether the namespace is the caller's generation: one MGET (about 2-3 us in Redis),
-- which reads G.small too, so a call that checks its generation knows `bodies_small`
-- at no cost.
local function same_generation()
  if GEN == '' then return true end
  local v = redis.call('MGET', G.generation, G.small)
  SMALL = v[2] ~= false
  return v[1] == GEN
end

local function namespace_lost()
  return redis.error_reply('NAMESPACE_LOST the namespace this call was made for is gone')
end

-- Every script checks the generation before it runs, except those scripts.rs composes
-- with this set false (FENCED_BY_OWNER there): they change a job only when it is
-- reserved under the caller's owner token, and a token is one process's own (a random
-- instance id, a counter), taken by a reserve that passed this check, so the job is
-- that reserve's, in the caller's namespace. They save the GET; `delete`, which also
-- deletes jobs nobody holds, checks (`same_generation`) before it does.
local CHECK_FIRST = true
if CHECK_FIRST and not same_generation() then
  return namespace_lost()
end

-- The script's own key `i`.
local function own_key(i)
  return KEYS[N_NS_KEYS + i]
end

-- The keys of tube group `i` in a call with `own` own keys.
local function tube_keys(own, i)
  return tube_group(N_NS_KEYS + own + (i - 1) * N_TUBE_KEYS + 1)
end

-- Redis' clock, read once per call: a call runs whole before any other, so all it
-- changes happens at one instant, and a call of several operations (many.lua) pays
-- one TIME for all of them.
local NOW = nil

local function now_us()
  if not NOW then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return NOW
end

-- Ids are handled as decimal strings: hash fields and zset members are strings, and a
-- Lua number handed to redis.call is formatted with sprintf on every call.
local function id20(id)
  return string.rep('0', 20 - #id) .. id
end

-- The id of a zset member (its zero-padded form).
local function id_of(member)
  return string.match(member, '[1-9]%d*$')
end

-- Retention (store/retention.rs; docs/plans/retention.md), on only when the call's
-- retention argument says so: "<conn> <keep_ms> <max_jobs> <max_bytes> <bodies 0|1>"
-- ('' when off: then no script below issues a command more). A script sets RET from
-- it before any transition (`ret_of`); every event is then appended to the job's
-- history, the string key {P}:jh:<id> in History::encode's form ("<dropped> <at_ms>
-- <code><conn> ..."), and a delete moves the job's record to the retained set:
-- {P}:ret:<id> (hash: t tube, k key, d deleted_ms, f figures, h history, n body
-- length, b body when kept, z its accounted size), {P}:retained (zset deleted_ms ->
-- id20, so ties list in id order), {P}:retained:key (hash "<tube>\n<key>" -> the
-- newest id) and {P}:retained:bytes (the sum of z). Their names are spelt from the
-- namespace's tag (keys.rs' Keys::retained* spell the same), so they share its slot.
local RET = false

-- The retention argument `s` at `now` (us; read from Redis when nil). -> false when
-- off, else {tag, conn, keep, jobs, bytes, bodies, ms (string), ms_n}.
local function ret_of(s, now)
  if s == '' or s == '-' then return false end
  local conn, keep, jobs, bytes, bodies = string.match(s, '^(%d+) (%d+) (%d+) (%d+) ([01])$')
  if not conn then return false end
  local ms = math.floor((now or now_us()) / 1000)
  return { tag = string.match(KEYS[1], '^%b{}'), conn = conn, keep = tonumber(keep),
    jobs = tonumber(jobs), bytes = tonumber(bytes), bodies = bodies == '1',
    ms = string.format('%d', ms), ms_n = ms }
end

-- The connection in owner token `owner` ("<instance>:<conn>:<n>", reclaim.rs), '0'
-- when there is none.
local function conn_of(owner)
  return string.match(owner or '', ':(%d+):%d+$') or '0'
end

local function ret_key(name)
  return RET.tag .. ':' .. name
end

-- History::encode's bounds: the first HIST_HEAD events and the latest HIST_TAIL.
local HIST_HEAD = 8
local HIST_TAIL = 24

-- A history whose text grows past this is cut to the bounds (decode applies them
-- anyway): most appends stay one APPEND, and the string stays bounded. Twice what 32
-- events of 20-digit connections take, so a cut always leaves room for many appends.
local HIST_BYTES = 2048

-- History `h` cut to the bounds, the events between counted as dropped. -> the text,
-- the number of events it keeps.
local function hist_bound(h)
  local words = {}
  for w in string.gmatch(h, '%S+') do words[#words + 1] = w end
  local n = #words - 1
  if n <= HIST_HEAD + HIST_TAIL then return h, math.max(n, 0) end
  local kept = { string.format('%d', tonumber(words[1]) + n - HIST_HEAD - HIST_TAIL) }
  for i = 2, HIST_HEAD + 1 do kept[#kept + 1] = words[i] end
  for i = #words - HIST_TAIL + 1, #words do kept[#kept + 1] = words[i] end
  return table.concat(kept, ' '), HIST_HEAD + HIST_TAIL
end

-- Append event `code` by connection `conn` (a decimal string) to job `id`'s history.
-- A job put while retention was off has none yet: its history starts here.
local function note(id, code, conn)
  local k = ret_key('jh:' .. id)
  local ev = ' ' .. RET.ms .. code .. conn
  local n = redis.call('APPEND', k, ev)
  if n == #ev then
    redis.call('SET', k, '0' .. ev)
  elseif n > HIST_BYTES then
    redis.call('SET', k, (hist_bound(redis.call('GET', k))))
  end
end

-- The most records one call evicts (by age, then by count or bytes): a call's work
-- stays bounded; the tick's `retain` call and the next delete take the rest.
local RET_EVICT = 100

-- Retained record of member `m` (id20) goes: its hash, its place in the order, its
-- size from the total, and its key's entry unless that names a newer record. -> the
-- size it had.
local function ret_evict(m)
  redis.call('ZREM', ret_key('retained'), m)
  local id = id_of(m)
  if not id then return 0 end
  local rec = ret_key('ret:' .. id)
  local f = redis.call('HMGET', rec, 't', 'k', 'z')
  redis.call('DEL', rec)
  if f[3] then redis.call('DECRBY', ret_key('retained:bytes'), f[3]) end
  if f[1] and f[2] then
    local idx, field = ret_key('retained:key'), f[1] .. '\n' .. f[2]
    if redis.call('HGET', idx, field) == id then redis.call('HDEL', idx, field) end
  end
  return tonumber(f[3] or '0')
end

-- Evict records deleted before RET's horizon, then the oldest while over the count
-- or bytes bound; at most RET_EVICT of each. `total`: the bytes total when the caller
-- knows it (read otherwise). -> how many went by age.
local function ret_trim(total)
  local Z, B = ret_key('retained'), ret_key('retained:bytes')
  total = total or tonumber(redis.call('GET', B) or '0')
  local horizon = string.format('%d', RET.ms_n - RET.keep)
  local old = redis.call('ZRANGEBYSCORE', Z, '-inf', '(' .. horizon, 'LIMIT', 0, RET_EVICT)
  for _, m in ipairs(old) do total = total - ret_evict(m) end
  local n = redis.call('ZCARD', Z)
  for _ = 1, RET_EVICT do
    if n <= RET.jobs and total <= RET.bytes then break end
    local head = redis.call('ZRANGE', Z, 0, 0)
    if not head[1] then
      -- Nothing left to count: the total restarts true.
      redis.call('SET', B, 0)
      break
    end
    total = total - ret_evict(head[1])
    n = n - 1
  end
  return #old
end

-- Job meta, a msgpack array (leader mode reads and writes the same: src/redis/meta.rs).
-- READY is when the job last became ready (us), so a reserve can report how long it
-- waited; jobs written before it existed lack it (nil).
-- DELAY and TTR are whole seconds (rounded down); a job whose delay or TTR is not
-- whole seconds also has DELAY_MS and TTR_MS (ms), so a job in seconds keeps the
-- 14-field layout that versions before milliseconds read. A keyed job also has KEY and
-- WINDOW_MS (ms), after the millisecond fields, which it then always has. A job a dead
-- letter rule buried (see `dead_letter`) has DEAD, the reason ("reserves:5:5"), while it
-- stays buried; it then has every field before it (KEY '' and WINDOW_MS 0 without a key:
-- cmsgpack packs a table with holes as a map), and keeps them once DEAD is cleared.
local PRI, DELAY, TTR, CREATED, STATE, DUE, OWNER, RESERVES, TIMEOUTS, RELEASES, BURIES, KICKS, BSEQ,
  READY, DELAY_MS, TTR_MS, KEY, WINDOW_MS, DEAD = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
  16, 17, 18, 19

-- A job's duration in ms: its millisecond field while that agrees with the whole
-- seconds (a version before milliseconds may have changed the seconds and kept it),
-- else the seconds.
local function finer(j, secs, ms)
  local v = j[ms]
  if v and math.floor(v / 1000) == j[secs] then return v end
  return j[secs] * 1000
end

local function delay_ms(j) return finer(j, DELAY, DELAY_MS) end
local function ttr_ms(j) return finer(j, TTR, TTR_MS) end

-- Set a job's delay and TTR (ms). cmsgpack packs a table as an array only without
-- holes, so READY is filled before the millisecond fields follow it.
local function set_times(j, delay, ttr)
  j[DELAY], j[TTR] = math.floor(delay / 1000), math.floor(ttr / 1000)
  if delay % 1000 == 0 and ttr % 1000 == 0 and not j[KEY] then
    j[TTR_MS] = nil
    j[DELAY_MS] = nil
  else
    if j[READY] == nil then j[READY] = 0 end
    j[DELAY_MS], j[TTR_MS] = delay, ttr
  end
end

-- Bodies at least this large (LARGE_BODY in store/mod.rs) are not handed through Lua:
-- Redis would copy them into Lua and out again, serving nobody meanwhile.
local LARGE_BODY = 1048576

-- A job's own key. Only the functions from here to `forget_job` name where a job's
-- tube, metadata and body are kept, so a change of that layout changes them alone: one
-- hash per job, {<prefix>}:j:<id> (keys.rs' Keys::job; docs/REDIS.md), with t its
-- tube's name, m its meta (the msgpack array above) and b its body (every job has one,
-- maybe empty: a job without it is damaged). A hash with b and no m is a large body
-- written ahead of its job (large.rs): the namespace's `ahead` set names it until its
-- put writes the rest.
local function job_key(id)
  return job_key_of(G.tag, id)
end

-- A job's body (false when it has none), and its size (0 when none).
local function job_body(id)
  return redis.call('HGET', job_key(id), 'b')
end

local function body_size(id)
  return redis.call('HSTRLEN', job_key(id), 'b')
end

local function has_body(id)
  return redis.call('HEXISTS', job_key(id), 'b') == 1
end

-- Whether no body of LARGE_BODY or more was ever written in the namespace: G.small
-- exists (a fresh namespace's `init` makes it; the first body written ahead deletes it,
-- fenced.rs' body_ahead; a new leader deletes it, cluster/takeover.rs). Then a body is
-- read without first asking its length. Read once per call, by the generation check
-- when the call makes one. A namespace without it (made by a version before it, or
-- once a large body was written) asks each body's length first.
local function bodies_small()
  if SMALL == nil then SMALL = redis.call('EXISTS', G.small) == 1 end
  return SMALL
end

-- A job's body for a reply: the body; its length (a number) when it is large, for the
-- caller to read with a plain HGET (see large.rs); false when the job has none.
local function body_for_reply(id)
  if not bodies_small() then
    local n = body_size(id)
    if n >= LARGE_BODY then return n end
  end
  return job_body(id)
end

local function set_body(id, body)
  redis.call('HSET', job_key(id), 'b', body)
end

-- The tube job `id` is of (false when its hash names none).
local function job_tube(id)
  return redis.call('HGET', job_key(id), 't')
end

-- Job `id` found by its id alone (the caller does not know its tube: its hash names
-- it): its tube and meta, or nil when there is no such job (no hash, or a large body
-- written ahead of its job: no tube and no meta yet).
local function find_job(id)
  local v = redis.call('HMGET', job_key(id), 't', 'm')
  if not v[1] or not v[2] then return nil end
  return v[1], cmsgpack.unpack(v[2])
end

-- Job `id`'s meta, or nil when it has none or is not `tube`'s: a caller that found its
-- tube by the id alone (RedisStore::tubes_of) may have raced a move to another tube, and
-- must then not touch it through this tube's keys.
local function get_job(tube, id)
  local t, j = find_job(id)
  if t ~= tube then return nil end
  return j
end

-- `get_job` and `body_for_reply` in one read (what a reserve needs; two while a large
-- body may be there: `bodies_small`): the meta (nil as `get_job` says), then the body
-- for a reply (false when the job has none).
local function job_for_reply(tube, id)
  local k = job_key(id)
  local n = 0
  if not bodies_small() then n = redis.call('HSTRLEN', k, 'b') end
  local v
  if n >= LARGE_BODY then
    v = redis.call('HMGET', k, 't', 'm')
    v[3] = n
  else
    v = redis.call('HMGET', k, 't', 'm', 'b')
  end
  if v[1] ~= tube or not v[2] then return nil, v[3] end
  return cmsgpack.unpack(v[2]), v[3]
end

local function put_job(id, j)
  redis.call('HSET', job_key(id), 'm', cmsgpack.pack(j))
end

-- Job `id` of `tube` with meta `j`, its tube and meta written (a new job, or one moved
-- to `tube`), its body too unless `body` is nil (a moved job's, or a large body written
-- ahead: the hash holds it already).
local function write_job(id, tube, j, body)
  if body then
    redis.call('HSET', job_key(id), 't', tube, 'm', cmsgpack.pack(j), 'b', body)
  else
    redis.call('HSET', job_key(id), 't', tube, 'm', cmsgpack.pack(j))
  end
end

-- A large body written ahead (see `job_key`) whose job was never made (no meta: its put
-- failed, or its writer died before it) goes. Whether there was one.
local function drop_ahead(id)
  local k = job_key(id)
  if redis.call('HEXISTS', k, 'm') == 1 then return false end
  return redis.call('DEL', k) == 1
end

-- Job `id` goes whole: its tube, meta and body (not its place in a set: `detach`).
local function forget_job(id)
  redis.call('DEL', job_key(id))
end

-- Whether job meta `j` (nil: no job) is reserved under owner token `owner`: the proof
-- that lets a script composed without the generation check first (CHECK_FIRST) change
-- it. Any other job such a script answers, or changes, only after `same_generation`.
local function held_by(j, owner)
  return j ~= nil and j[STATE] == 'reserved' and j[OWNER] == owner
end

-- Take a job out of the structure its state puts it in. (The sets are the only record
-- of how many jobs are in each state: `stats` counts them, so no total can drift.)
local STATE_SET = { ready = 'ready', delayed = 'delayed', reserved = 'reserved', buried = 'buried' }

local function detach(T, id, j)
  local set = STATE_SET[j[STATE]]
  if set then redis.call('ZREM', T[set], id20(id)) end
end

-- Put a detached job in `state`; `due` is the due time or TTR deadline. A dead letter's
-- reason goes with the buried state, whatever takes the job out of it.
local function attach(T, G, id, j, state, due, owner)
  local m = id20(id)
  j[STATE], j[DUE], j[OWNER] = state, due or 0, owner or ''
  if state ~= 'buried' then j[DEAD] = nil end
  if state == 'ready' then
    redis.call('ZADD', T.ready, j[PRI], m)
  elseif state == 'delayed' then
    redis.call('ZADD', T.delayed, due, m)
  elseif state == 'reserved' then
    redis.call('ZADD', T.reserved, due, m)
  elseif state == 'buried' then
    j[BSEQ] = redis.call('INCR', G.seq)
    redis.call('ZADD', T.buried, j[BSEQ], m)
  end
end

-- The due index holds, per tube, a time at or before the tube's earliest due time (a
-- delayed job, a TTR deadline (which lapses strictly after it), or the end of a pause).
-- An entry may be early -- a job it stood for was deleted or kicked -- never late: the
-- tick of a tube whose entry came due recomputes it exactly. So the hot paths only
-- ever lower an entry (`due_by`), and removing a job costs nothing here.
local function reschedule(T, G, tube)
  local best = nil
  local d = redis.call('ZRANGE', T.delayed, 0, 0, 'WITHSCORES')
  if d[2] then best = tonumber(d[2]) end
  local r = redis.call('ZRANGE', T.reserved, 0, 0, 'WITHSCORES')
  if r[2] then
    local v = tonumber(r[2]) + 1
    if not best or v < best then best = v end
  end
  local p = tonumber(redis.call('HGET', T.meta, 'pause_until') or '0')
  if p > 0 and (not best or p < best) then best = p end
  if best then
    redis.call('ZADD', G.due, best, tube)
  else
    redis.call('ZREM', G.due, tube)
  end
end

-- Something in `tube` comes due at `at`: lower its due-index entry to it if later.
local function due_by(G, tube, at)
  redis.call('ZADD', G.due, 'LT', at, tube)
end

-- Add the tube to the tube list if it is not there.
local function ensure_tube(G, tube)
  if redis.call('HEXISTS', G.tubepos, tube) == 0 then
    local n = redis.call('RPUSH', G.tubes, tube)
    redis.call('HSET', G.tubepos, tube, n - 1)
  end
end

-- Destroy the tube (with its counters and pause) when nothing refers to it.
local function maybe_gc(T, G, tube)
  if tube == 'default' then return end
  -- References first: a tube in use (the common case) is decided in one call.
  local refs = redis.call('HMGET', T.meta, 'using', 'watching')
  if tonumber(refs[1] or '0') + tonumber(refs[2] or '0') > 0 then return end
  local jobs = redis.call('ZCARD', T.ready) + redis.call('ZCARD', T.delayed)
    + redis.call('ZCARD', T.reserved) + redis.call('ZCARD', T.buried)
  if jobs > 0 then return end
  -- No job is left in it (each job is a key of its own: `forget_job`).
  redis.call('DEL', T.meta)
  redis.call('ZREM', G.due, tube)
  local pos = redis.call('HGET', G.tubepos, tube)
  if not pos then return end
  redis.call('HDEL', G.tubepos, tube)
  -- The reference's list removal: the last element moves into the hole.
  local last = redis.call('RPOP', G.tubes)
  if last ~= tube then
    redis.call('LSET', G.tubes, tonumber(pos), last)
    redis.call('HSET', G.tubepos, last, pos)
  end
end

-- Tell the other instances that `tube` gained a reservable job. `origin` is
-- "<instance>\n<channel>"; the message is "<instance>\n<tube>", so the sender, which
-- serves its own waiters without it, skips its own messages. With no other instance
-- subscribed, nothing is published at all. A shard channel (SPUBLISH): it hashes like
-- the namespace's keys, so on a Redis Cluster it stays on the slot's primary (and its
-- replicas) instead of crossing the bus to every node, and SHARDNUMSUB counts the
-- subscribers where they are (NUMSUB would count the local node's only).
-- Whether another instance listens (nil until a call first asks): one SHARDNUMSUB per
-- call, however many tubes it wakes.
local LISTENED = nil

local function wake(origin, tube)
  local instance, channel = string.match(origin, '^([^\n]*)\n(.*)$')
  if LISTENED == nil then
    LISTENED = redis.call('PUBSUB', 'SHARDNUMSUB', channel)[2] > 1
  end
  if LISTENED then
    redis.call('SPUBLISH', channel, instance .. '\n' .. tube)
  end
end

local function paused(T, now)
  local pu = redis.call('HGET', T.meta, 'pause_until')
  return pu and tonumber(pu) > now
end

-- A tube's policy (store/policy.rs) as the Rust side hands it to a script where a
-- reservation ends: "<reserves> <timeouts> <base_ms> <factor> <max_ms> <jitter>" (a
-- dead letter's limits, 0 for none; a backoff, base 0 for none), '' or '-' for a tube
-- without one. -> the rule, or nil (with no policies, the scripts do nothing more).
local function rule_of(s)
  if s == '' or s == '-' then return nil end
  local r, t, base, factor, max, jitter =
    string.match(s, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  return { reserves = tonumber(r), timeouts = tonumber(t), base = tonumber(base),
    factor = tonumber(factor), max = tonumber(max), jitter = tonumber(jitter) }
end

-- The rules of a call over several tubes: `s` holds tube i's rule on line i ('-' for
-- none), or is '' when none of them has one. -> tube index -> rule, or nil.
local function rules_of(s)
  if s == '' then return nil end
  local rules, i = {}, 0
  for line in string.gmatch(s, '[^\n]+') do
    i = i + 1
    rules[i] = rule_of(line)
  end
  return rules
end

-- Whether job `j`'s counters reach a dead letter `limit` (0: none): each kick gives the
-- limit again (DeadLetter::verdict; its product saturates at u32::MAX).
local function reached(limit, count, kicks)
  return limit > 0 and count >= math.min(limit * (kicks + 1), 4294967295)
end

-- Job `id` (meta `j`, detached, its counters counted) ended a reservation without a
-- delete: when `rule` has a dead letter limit it reached (timeouts first), it is buried
-- as bury.lua buries (its priority kept, one bury more, at the end of the buried FIFO)
-- with the reason, its meta written. Whether it was.
local function dead_letter(T, G, id, j, rule)
  if not rule then return false end
  local cause, count, limit = nil, 0, 0
  if reached(rule.timeouts, j[TIMEOUTS], j[KICKS]) then
    cause, count, limit = 'timeouts', j[TIMEOUTS], rule.timeouts
  elseif reached(rule.reserves, j[RESERVES], j[KICKS]) then
    cause, count, limit = 'reserves', j[RESERVES], rule.reserves
  else
    return false
  end
  -- The reservation that ended is the one its owner token (still in `j`) names.
  if RET then note(id, 'x', conn_of(j[OWNER])) end
  j[BURIES] = j[BURIES] + 1
  attach(T, G, id, j, 'buried')
  -- Every field before DEAD, as set_times and a keyed put fill them.
  if j[READY] == nil then j[READY] = 0 end
  if j[DELAY_MS] == nil then j[DELAY_MS], j[TTR_MS] = j[DELAY] * 1000, j[TTR] * 1000 end
  if j[KEY] == nil then j[KEY], j[WINDOW_MS] = '', 0 end
  j[DEAD] = cause .. ':' .. count .. ':' .. limit
  put_job(id, j)
  return true
end

-- The delay (ms) of a release with delay 0 under `rule`'s backoff, for a job released
-- `releases` times before: Backoff::delay_ms exactly (`spread`, in [-1, 1], drawn by
-- the caller: where in the jitter it lands), rounded, at least 1 ms, at most what a
-- release may ask (u32::MAX s).
local function backoff_delay(rule, releases, spread)
  local grown = rule.base * rule.factor ^ math.min(releases, 1024)
  local moved = math.min(grown, rule.max) * (1 + rule.jitter * spread)
  return math.min(math.max(math.floor(moved + 0.5), 1), 4294967295000)
end

-- Make job `id` (with meta `j`) ready, bumping counter `bump` (an index) if given.
-- `since` is when it became ready (default now): the end of its delay or its lapsed
-- deadline when a tick finds it late. A reservation that ends (a lapse, its holder's
-- close) passes its tube's `rule`, which may bury it instead (`dead_letter`). Whether
-- it went ready.
local function to_ready(T, G, id, j, bump, since, rule)
  detach(T, id, j)
  if bump then j[bump] = j[bump] + 1 end
  if dead_letter(T, G, id, j, rule) then return false end
  j[READY] = since or now_us()
  attach(T, G, id, j, 'ready')
  put_job(id, j)
  return true
end

-- Place job `id` (meta `j`, detached, times set) of `tube` in its set: delayed by
-- `delay` ms from `now`, else ready (waking the tube's waiters, unless `woken`: a
-- batch wakes a tube once). Its meta is the caller's to write (`place` does).
local function set_place(T, G, tube, origin, id, j, delay, now, woken)
  if delay > 0 then
    local due = now + delay * 1000
    attach(T, G, id, j, 'delayed', due)
    due_by(G, tube, due)
  else
    j[READY] = now
    attach(T, G, id, j, 'ready')
    if not woken then wake(origin, tube) end
  end
end

-- `set_place`, its meta written.
local function place(T, G, tube, origin, id, j, delay, now, woken)
  set_place(T, G, tube, origin, id, j, delay, now, woken)
  put_job(id, j)
end

-- `release` of job `id` (meta `j`, reserved) of `tube` at `now` with `pri` and `delay`
-- (ms) under the tube's `rule` (nil: none): a dead letter first (buried, no delay),
-- else a delay 0 gets the rule's backoff (`spread` drawn by the caller), then placed as
-- `place` does. -> the delay it got, or nil when it was buried.
local function release_job(T, G, tube, origin, id, j, pri, delay, rule, spread, now, woken)
  detach(T, id, j)
  local releases = j[RELEASES]
  j[PRI], j[RELEASES] = pri, releases + 1
  -- A release a dead letter rule turns into a bury is that bury alone (as the memory
  -- store records it).
  if dead_letter(T, G, id, j, rule) then return nil end
  if RET then note(id, 'l', RET.conn) end
  if delay == 0 and rule and rule.base > 0 then delay = backoff_delay(rule, releases, spread) end
  set_times(j, delay, ttr_ms(j))
  place(T, G, tube, origin, id, j, delay, now, woken)
  return delay
end

-- A key's member in the namespace's window set.
local function win_member(tube, key)
  return tube .. '\n' .. key
end

-- What `key` names in `tube` (keys T) at `now`: the id, the state word and the meta of
-- its job; the id and 'DELETED' inside its window; nil when free (a window past its
-- end, or an entry whose job is gone, is freed here).
local function key_lookup(T, G, tube, key, now)
  local id = redis.call('HGET', T.keys, key)
  if not id then return nil end
  local j = get_job(tube, id)
  if j and j[KEY] == key then return id, string.upper(j[STATE]), j end
  local ends = redis.call('ZSCORE', G.keywin, win_member(tube, key))
  if ends and tonumber(ends) > now then return id, 'DELETED' end
  redis.call('HDEL', T.keys, key)
  redis.call('ZREM', G.keywin, win_member(tube, key))
  return nil
end

-- Ids a call of several puts (many.lua) took from the counter at once: the next to
-- hand out and the last (nil: none taken, each put takes its own).
local ID_BLOCK = nil

-- A fresh job id: the namespace's counter, as a decimal string.
local function new_id(G)
  if ID_BLOCK and ID_BLOCK.next <= ID_BLOCK.last then
    local n = ID_BLOCK.next
    ID_BLOCK.next = n + 1
    return string.format('%d', n)
  end
  local n = redis.call('INCR', G.ids)
  -- A Lua number is a double: past 2^53 only the counter's own text is exact.
  return n < 9007199254740992 and string.format('%d', n) or redis.call('GET', G.ids)
end

-- Take `n` ids from the counter in one INCRBY, for the next `n` calls of `new_id`
-- (the ids they would have got one INCR at a time). Past 2^53 none is taken: each
-- put then reads the counter's own text.
local function take_ids(G, n)
  if n < 2 then return end
  local last = redis.call('INCRBY', G.ids, n)
  if last < 9007199254740992 then ID_BLOCK = { next = last - n + 1, last = last } end
end

-- The puts a call of several (many.lua) counted in the namespace's total_jobs but not
-- yet written (nil: each put writes its own): many.lua adds them in one HINCRBY.
local PUTS_UNCOUNTED = nil

-- A new job `id` of `tube`, as every put makes one (put, put_key, fire): its hash
-- written in one command (`write_job`: its body too unless `body` is nil, a large body
-- there already, see large.rs), counted in the tube's and the namespace's total_jobs,
-- its key (when not nil; then `window` ms of dedupe window after its delete) naming
-- it, placed delayed or ready (waking the tube's waiters on every instance) at `now`.
-- Shared so a scheduled job is made exactly as a put's.
local function put_new(T, G, tube, origin, id, body, pri, delay, ttr, now, key, window)
  -- A tube whose meta already counts a put is in the tube list: both go together when
  -- it is destroyed, so only a tube's first put (since its meta was made) checks it.
  if redis.call('HINCRBY', T.meta, 'total_jobs', '1') == 1 then ensure_tube(G, tube) end
  local j
  if key then
    j = { pri, 0, 0, now, '', 0, '', 0, 0, 0, 0, 0, 0, now, 0, 0, key, window }
  else
    j = { pri, 0, 0, now, '', 0, '', 0, 0, 0, 0, 0, 0, now }
  end
  set_times(j, delay, ttr)
  if PUTS_UNCOUNTED then
    PUTS_UNCOUNTED = PUTS_UNCOUNTED + 1
  else
    redis.call('HINCRBY', G.stats, 'total_jobs', '1')
  end
  if key then redis.call('HSET', T.keys, key, id) end
  if RET then redis.call('SET', ret_key('jh:' .. id), '0 ' .. RET.ms .. 'p0') end
  set_place(T, G, tube, origin, id, j, delay, now)
  write_job(id, tube, j, body)
end

-- A schedule's cursor, field `name` of the cursor hash `C` (docs/REDIS.md, Schedules;
-- leader mode writes the same): "<last_tick_ms> <last_job> <fired> <deduped>
-- <skipped>", decimals one space apart. -> its five fields as strings (zeros for a
-- schedule without one), or nil and the text when it is not of that form. Kept as
-- strings so ticks and ids are never rounded through a double.
local function cursor_get(C, name)
  local v = redis.call('HGET', C, name)
  if not v then return { '0', '0', '0', '0', '0' } end
  local t, j, f, d, s = string.match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
  if not t then return nil, v end
  return { t, j, f, d, s }
end

-- Whether decimal `a` is greater than decimal `b`, exactly (both without leading
-- zeros, as every writer of a cursor formats them).
local function dec_gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end

-- Decimal `a` plus the number `n` (counters stay far below 2^53).
local function dec_add(a, n)
  return string.format('%d', tonumber(a) + n)
end

-- The most ended windows a delete frees before it opens its own (see `end_windows`):
-- the window set is kept short as it grows, at a bounded cost per delete.
local WINDOWS_PER_DELETE = 100

-- Window member `m` ("<tube>\n<key>", out of the window set) is over: its key is freed
-- in its tube's `keys` hash, unless the entry there now names the key's live job (what
-- `key_lookup` calls live: a job with this key), which a window's end must not free.
-- The tube's keys are named from the member (every key of a namespace shares its hash
-- tag, so its slot; `G.tag`).
local function end_window(G, m)
  local tube, key = string.match(m, '^(.-)\n(.*)$')
  local keys = tube_key_of(G.tag, tube, 'keys')
  local id = redis.call('HGET', keys, key)
  if not id then return end
  local j = get_job(tube, id)
  if j and j[KEY] == key then return end
  redis.call('HDEL', keys, key)
end

-- At `now`: the windows past their end go (uncounted: they ran their course), then
-- those over `max`, nearest their end first (counted in stats' key_windows_evicted:
-- they end early), at most `budget` of each, so a call's work stays bounded however
-- many have piled up (the timer's sweep, windows.lua, takes the rest). The memory
-- store's `sweep_windows` does the same. Returns how many past their end went.
local function end_windows(G, max, now, budget)
  local ended = redis.call('ZRANGEBYSCORE', G.keywin, '-inf', now, 'LIMIT', 0, budget)
  for _, m in ipairs(ended) do
    end_window(G, m)
  end
  if ended[1] then redis.call('ZREM', G.keywin, unpack(ended)) end
  local over = math.min(redis.call('ZCARD', G.keywin) - max, budget)
  for _ = 1, over do
    end_window(G, redis.call('ZPOPMIN', G.keywin)[1])
  end
  if over > 0 then
    redis.call('HINCRBY', G.stats, 'key_windows_evicted', over)
  end
  return #ended
end

-- Job `id` (meta `j`) of `tube` is being deleted: its key is freed, or with `window`
-- its dedupe window opens at `now` (at most `max` windows stay open). `now` nil: the
-- clock is read here, only when a window opens (most deletes have no key: no TIME).
local function end_key(T, G, tube, id, j, now, window, max)
  local key = j[KEY]
  -- '' is a dead letter's padding (see DEAD), not a key.
  if not key or key == '' or redis.call('HGET', T.keys, key) ~= id then return end
  local ms = tonumber(j[WINDOW_MS] or 0)
  if window and ms > 0 then
    now = now or now_us()
    redis.call('ZADD', G.keywin, now + ms * 1000, win_member(tube, key))
    end_windows(G, max, now, WINDOWS_PER_DELETE)
  else
    redis.call('HDEL', T.keys, key)
  end
end

-- Job `id` (meta `j`) of `tube` is deleted (event `code` by `conn`) while retention
-- is on: its record, as `stats-job` last showed it, joins the retained set (see RET),
-- which is then trimmed to its bounds. Called before the job's hash goes. The
-- size is Retained::bytes(): 128 + tube + key + 24 per kept event + the body kept. A
-- large body (see LARGE_BODY) is never copied through Lua: its record keeps its size.
local function retain(tube, id, j, code, conn)
  local hk = ret_key('jh:' .. id)
  local h, events = hist_bound((redis.call('GET', hk) or '0') .. ' ' .. RET.ms .. code .. conn)
  redis.call('DEL', hk)
  local len = body_size(id)
  local key = j[KEY]
  if key == '' then key = nil end
  local size = 128 + #tube + (key and #key or 0) + 24 * events
  local f = string.format('%d %d %d %d %d %d %d %d %d', j[PRI], delay_ms(j), ttr_ms(j),
    math.floor(j[CREATED] / 1000), j[RESERVES], j[TIMEOUTS], j[RELEASES], j[BURIES], j[KICKS])
  local rec = { 't', tube, 'd', RET.ms, 'f', f, 'h', h, 'n', len }
  if key then
    rec[#rec + 1] = 'k'
    rec[#rec + 1] = key
    redis.call('HSET', ret_key('retained:key'), tube .. '\n' .. key, id)
  end
  if RET.bodies and len < LARGE_BODY then
    rec[#rec + 1] = 'b'
    rec[#rec + 1] = job_body(id) or ''
    size = size + len
  end
  rec[#rec + 1] = 'z'
  rec[#rec + 1] = size
  -- One write of the whole hash: Redis sizes it once.
  redis.call('HSET', ret_key('ret:' .. id), unpack(rec))
  redis.call('ZADD', ret_key('retained'), RET.ms, id20(id))
  ret_trim(redis.call('INCRBY', ret_key('retained:bytes'), size))
end

-- Delete job `id` (meta `j`) of `tube`: its key freed or its window opened (see
-- `end_key`), the tube destroyed when nothing refers to it any more. The job is gone
-- before its key is ended: a window evicted at once (over `max`, its own among them)
-- then frees the key, which `end_window` keeps while the key's job is there. `now`:
-- the caller's clock reading, if it has one (nil: read only if a window opens).
local function delete_job(T, G, tube, id, j, window, max, now)
  if RET then retain(tube, id, j, 'd', RET.conn) end
  detach(T, id, j)
  forget_job(id)
  end_key(T, G, tube, id, j, now, window, max)
end

-- How long the ready job `j` has waited at `now` (us), or -1 when it was not recorded.
local function waited(j, now)
  if not j[READY] then return -1 end
  return math.max(now - j[READY], 0)
end

-- Member `m` (job `id`) of `set` has lost its meta or body (what eviction or damage
-- leaves): what is left of it goes, so it is never served empty and never blocks the
-- tube's other jobs. The caller reports it. A member of `tube`'s set whose job says it
-- is another tube's is a stray: only the member goes, the job stays that tube's.
local function drop_damaged(tube, set, m, id)
  redis.call('ZREM', set, m)
  if not id then return end
  local t = job_tube(id)
  if t and t ~= tube then return end
  forget_job(id)
  if RET then redis.call('DEL', ret_key('jh:' .. id)) end
end

-- One reserve across the watched tubes: each watched tube's reserve group in order,
-- from KEYS[k0]; the tube names are a[base + 1 ..] (`a` the call's arguments, or one
-- operation's in many.lua). Picks the ready
-- job with the least (pri, id) among tubes that are not paused, for `owner` at `now`.
-- -> nil when none is ready; a reservation {id, body (its length when large: see
-- body_for_reply), deadline, tube index (1-based), now, waited (us, -1 unknown)}; or
-- false and a DAMAGED message, when the job picked had lost its meta or body (it is
-- dropped, not served).
local function reserve_one(owner, now, a, base, k0)
  local n = #a - base
  local function first_key(i)
    return k0 + (i - 1) * N_RESERVE_KEYS
  end
  local best_i, best_m = nil, nil
  if n == 1 then
    -- One watched tube (the common case): its head is taken at once, and put back if
    -- the tube is paused; one command fewer than looking first and taking after.
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
    for i = 1, n do
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
  local tube = a[base + best_i]
  local id = id_of(best_m)
  local j, body = nil, nil
  if id then j, body = job_for_reply(tube, id) end
  if not j or not body then
    drop_damaged(tube, T.ready, best_m, id)
    return false, 'DAMAGED job ' .. tostring(id) .. ' in tube ' .. tube
      .. ' lost its ' .. (j and 'body' or 'meta') .. ' in Redis (evicted?): dropped, not served'
  end
  local w = waited(j, now)
  local deadline = now + ttr_ms(j) * 1000
  j[RESERVES] = j[RESERVES] + 1
  attach(T, G, id, j, 'reserved', deadline, owner)
  put_job(id, j)
  due_by(G, tube, deadline + 1)
  if RET then note(id, 'r', RET.conn) end
  return { id, body, deadline, best_i, now, w }
end

-- The operator API's view of job `id` (meta `j`) at `now`: {id, sort score, body size,
-- holder's owner token ('' unless reserved), its key ('' unless keyed), why a dead
-- letter rule buried it ('' unless it did), then the `job_info` figures}. The sort
-- score is the job's key in its state's set (priority, due time or deadline, bury
-- sequence), what a listing's cursor resumes after.
local function admin_entry(id, j, now)
  local score = j[DUE]
  if j[STATE] == 'ready' then score = j[PRI] elseif j[STATE] == 'buried' then score = j[BSEQ] end
  local owner = ''
  if j[STATE] == 'reserved' then owner = j[OWNER] or '' end
  return { id, score, body_size(id), owner, j[KEY] or '',
    j[DEAD] or '', j[PRI],
    delay_ms(j), ttr_ms(j),
    j[CREATED], j[STATE], j[DUE], j[RESERVES], j[TIMEOUTS], j[RELEASES], j[BURIES], j[KICKS],
    now }
end

-- A delete of job `id` (meta `j`) of `tube` (its group `T`), found deletable (not
-- reserved, or reserved by the caller): `max` the most dedupe windows open at once,
-- `ret` the retention argument (see RET). -> 1 (deleted). delete_op's and
-- delete_job_op's. `referred`: a connection of the caller's instance uses or watches
-- the tube, so it stays (as in beanstalkd, a tube a connection refers to is not
-- destroyed) and `maybe_gc`'s read is saved; when that reference ends, `tube_ref`,
-- `close` or `reap` destroys the tube if it is empty then.
local function delete_found(T, tube, id, j, max, ret, referred)
  RET = ret_of(ret)
  delete_job(T, G, tube, id, j, true, tonumber(max))
  redis.call('HINCRBY', T.meta, 'cmd_delete', '1')
  if not referred then maybe_gc(T, G, tube) end
  return 1
end

-- The operations many.lua runs several of in one call, each the whole body of its own
-- script (put.lua, reserve.lua, delete.lua call them alone): `a` is the operation's
-- arguments, numbered as its script's ARGV; its keys start at KEYS[k] (a tube group,
-- or a reserve's groups). -> the script's reply.

-- put: a[3] pri, a[4] delay (ms), a[5] ttr (ms), a[6] body, a[7] the retention
-- argument (see RET) -> the id. a[8], when given: an id the caller took, under which
-- it wrote the body already (a large body stays out of Lua, see large.rs; G.ahead
-- names it until now); a[6] is then empty.
local function put_op(k, a)
  local T, tube, origin = tube_group(k), a[1], a[2]
  local now = now_us()
  RET = ret_of(a[7], now)
  local id, body = a[8], nil
  if id then
    if not has_body(id) then
      return redis.error_reply('BODY_MISSING the body written ahead of this put is gone')
    end
    redis.call('ZREM', G.ahead, id)
  else
    id, body = new_id(G), a[6]
  end
  put_new(T, G, tube, origin, id, body, tonumber(a[3]), tonumber(a[4]), tonumber(a[5]), now)
  return id
end

-- reserve across watched tubes (the reserve group of each, in the order of their
-- names): a[1] origin (unused), a[2] owner, a[3] the retention argument (see RET),
-- a[4..] the tube names. -> nil, or the reservation of `reserve_one` (a damaged job: a
-- DAMAGED error, the job dropped).
local function reserve_op(k, a)
  local now = now_us()
  RET = ret_of(a[3], now)
  local r, damaged = reserve_one(a[2], now, a, 3, k)
  if damaged then return redis.error_reply(damaged) end
  return r
end

-- delete: a[3] id, a[4] the owner token the caller holds it under (a job the caller
-- does not hold is delete_job.lua's, found by its id alone), a[5]
-- the most dedupe windows open at once, a[6] the retention argument (see RET: the
-- job's record is retained), a[7] '1' when a connection of the caller's instance
-- uses or watches the tube (see `delete_found`; absent: '0')
-- -> 1 deleted, 0 not found (or held by another). Its
-- script is composed without the generation check first (CHECK_FIRST): a job the
-- caller holds is proof enough (`held_by`), and the check is made for any other answer.
local function delete_op(k, a)
  local T, tube, id = tube_group(k), a[1], a[3]
  local j = get_job(tube, id)
  local held = held_by(j, a[4])
  if not held and not same_generation() then return namespace_lost() end
  if not j or (j[STATE] == 'reserved' and not held) then return 0 end
  return delete_found(T, tube, id, j, a[5], a[6], a[7] == '1')
end

-- delete_job: a delete by a connection that does not hold the job: a[1] id, a[2] the
-- most dedupe windows open at once, a[3] the retention argument (see RET); the job
-- found by its id alone (`find_job`: its tube's keys named here, so the call has no
-- keys of its own) -> 1 deleted, 0 not found or reserved (only its holder deletes it:
-- `delete_op`, with the holder's token). Its script checks the generation first.
local function delete_job_op(a)
  local id = a[1]
  local tube, j = find_job(id)
  if not tube or j[STATE] == 'reserved' then return 0 end
  return delete_found(tube_group_of(G.tag, tube), tube, id, j, a[2], a[3])
end
