package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua scripts. Every script gets the key prefix as ARGV[1] and builds
// its keys with the functions of luaLib, which mirror the key layout in the
// package documentation. A script that writes does its checks before its
// first write (Redis does not roll a failed script back), and returns
// strings and numbers only (a Lua false or nil would cut an array short).
//
// Numbers that leave Lua go through string.format('%d'): Lua's own number
// to string conversion switches to exponent notation at 1e14.

// luaLib is prepended to every script.
const luaLib = `
local P = ARGV[1]
local function enc(s) return #s .. ':' .. s end
local function kJob(E, id) return P .. 'j:' .. E .. ':' .. id end
-- memo is t[a][b], made by build(a, b) the first time it is asked for.
local function memo(t, a, b, build)
	local byA = t[a]
	if not byA then
		byA = {}
		t[a] = byA
	end
	local v = byA[b]
	if not v then
		v = build(a, b)
		byA[b] = v
	end
	return v
end
-- kSt, kAv, kRun, kFin and kFinAll keep the keys they build for the
-- rest of the script, by E and name: a group's jobs share their
-- namespace, statuses and queues, and a table lookup costs less than
-- building the string anew (a claim or an ack asks for three or four of
-- these a job).
local function buildSt(E, st) return P .. 'st:' .. E .. ':' .. st end
local function buildAv(E, q) return P .. 'av:' .. E .. ':' .. enc(q) end
local function buildRun(E) return P .. 'run:' .. E end
local function buildFin(E, st) return P .. 'fin:' .. E .. ':' .. st end
local function buildFinAll(st) return P .. 'fin:' .. st end
local stKeys, avKeys, runKeys, finKeys, finAllKeys = {}, {}, {}, {}, {}
local function kSt(E, st) return memo(stKeys, E, st, buildSt) end
local function kAv(E, q) return memo(avKeys, E, q, buildAv) end
local function kRun(E) return memo(runKeys, E, '', buildRun) end
local function kFin(E, st) return memo(finKeys, E, st, buildFin) end
local function kFinAll(st) return memo(finAllKeys, st, '', buildFinAll) end
local function kSc(E, q) return P .. 'sc:' .. E .. ':' .. enc(q) end
local function kScn(E) return P .. 'scn:' .. E end
local function kUk(E) return P .. 'uk:' .. E end
local function kDk(E) return P .. 'dk:' .. E end
local function kRt(E, q) return P .. 'rt:' .. E .. ':' .. enc(q) end
local function int(n) return string.format('%d', n) end
local function kLease(name) return P .. 'lease:' .. name end

-- checkFence is the first thing a job write does: a fenced write passes
-- its lease's key as KEYS[1] and the fence's holder and epoch as ARGV[2]
-- and ARGV[3] (a write without a fence passes no key, and '' for both).
-- It returns the error reply to send, or nil when the write may go on:
-- the lease is held by that holder at that epoch. The expiry is not
-- looked at: the epoch is what fences. A lease changes hands only
-- through scriptLeaseAcquire, which bumps the epoch and, being a script
-- too, runs wholly before or after the write.
local function checkFence()
	if #KEYS == 0 then return nil end
	local h, e = unpack(redis.call('HMGET', KEYS[1], 'holder', 'epoch'))
	if ARGV[2] ~= '' and h == ARGV[2] and e == ARGV[3] then return nil end
	return redis.error_reply('FENCED ' .. string.sub(KEYS[1], #P + 1) .. ' is held by "' .. tostring(h or '') .. '" at epoch ' ..
		tostring(e or 'none') .. ', not by "' .. ARGV[2] .. '" at epoch ' .. ARGV[3])
end
local function hex16(n) return string.format('%016x', tonumber(n)) end

-- A job's dispatch-order member (see the package documentation) is its
-- order key (the priority and run_at parts, 32 hex digits), its seq, its
-- task and its id. The hash keeps only the order key (field ak) and amOf
-- builds the member: the whole member (about 90 bytes) would be the one
-- value of a small job's hash over Redis's hash-max-listpack-value (64),
-- and one such value makes Redis keep the hash as a hash table, about
-- twice the memory and slower to write. A hash written by (or for) an
-- older node keeps the whole member instead (field am).
local taskHex = {}
local function amOf(id, ak, seq, task, am)
	if not ak then return am end
	local th = taskHex[task]
	if not th then
		th = string.format('%04x', #task)
		taskHex[task] = th
	end
	return ak .. hex16(seq) .. th .. task .. id
end

-- orderField is what a job hash keeps of its place in dispatch order, the
-- order key ak (compact: every node reads it) or the whole member am,
-- and the other field, to delete: field, value, other.
local function orderField(compact, ak, am)
	if compact then return 'ak', ak, 'am' end
	return 'am', am, 'ak'
end

-- release drops the unique and debounce keys id holds.
local function release(E, id, uk, dk)
	if uk and redis.call('HGET', kUk(E), uk) == id then redis.call('HDEL', kUk(E), uk) end
	if dk and redis.call('HGET', kDk(E), dk) == id then redis.call('HDEL', kDk(E), dk) end
end

-- rekey is the order key ak (or a whole member am) with its run_at part
-- replaced by rk: the new ak.
local function rekey(ak, rk) return string.sub(ak, 1, 16) .. rk end

-- Sorted-set writes can be gathered. A script that writes a group of
-- jobs (enqueue, claim, update) sets gather: zAdd and zRem then collect
-- members per key and command, and zFlush sends each key's as one command,
-- instead of one a job: each call costs a command and a keyspace lookup,
-- and these scripts make several a job. The script flushes before it reads a
-- sorted set it may have gathered writes for, before it writes one job a
-- second time (touch), and before it returns; paths that write one member
-- of one key twice (a debounce coalescing, a replay) run ungathered.
-- Scripts that do not set gather write at once.
local gather, zb, zo, seen = false, {}, {}, {}
local ZCHUNK = 2002 -- command, key, 1000 score and member pairs: within unpack's reach
local function zFlush()
	for _, t in ipairs(zo) do
		if #t > 2 then redis.call(unpack(t)) end
	end
	zb, zo, seen = {}, {}, {}
end
-- newRun starts the gathered command cmd of key k, in the order its
-- first member came.
local function newRun(cmd, k)
	local t = {cmd, k}
	zo[#zo + 1] = t
	return t
end
local function zPut(cmd, k, a, b)
	if not gather then
		if b then return redis.call(cmd, k, a, b) end
		return redis.call(cmd, k, a)
	end
	local t = memo(zb, cmd, k, newRun)
	t[#t + 1] = a
	if b then t[#t + 1] = b end
	if #t >= ZCHUNK then
		redis.call(unpack(t))
		for i = #t, 3, -1 do t[i] = nil end
	end
end
local function zAdd(k, score, m) zPut('ZADD', k, score, m) end
local function zRem(k, m) zPut('ZREM', k, m) end
-- touch flushes the gathered writes when job id was written before in
-- this script, so that its writes keep their order.
local function touch(id)
	if seen[id] then zFlush() end
	seen[id] = true
end
-- ungathered runs f with every write at once, after the gathered ones.
local function ungathered(f)
	local g = gather
	zFlush()
	gather = false
	f()
	gather = g
end

-- place puts a pending job in its queue's available or scheduled index.
local function place(E, q, id, am, due, score)
	if due == '1' then
		zAdd(kAv(E, q), 0, am)
	else
		zAdd(kSc(E, q), score, id)
		zAdd(kScn(E), score, id)
	end
end

local function unplace(E, q, id, am)
	zRem(kAv(E, q), am)
	zRem(kSc(E, q), id)
	zRem(kScn(E), id)
end

local function move(E, id, seq, from, to)
	zRem(kSt(E, from), id)
	zAdd(kSt(E, to), seq, id)
end

local function addFinished(E, id, seq, st, q, finUs, retryable)
	local m = hex16(seq) .. id
	zAdd(kFin(E, st), finUs, m)
	zAdd(kFinAll(st), finUs, E .. ':' .. id)
	if retryable then zAdd(kRt(E, q), finUs, m) end
end

local function delFinished(E, id, seq, st, q)
	local m = hex16(seq) .. id
	zRem(kFin(E, st), m)
	zRem(kFinAll(st), E .. ':' .. id)
	zRem(kRt(E, q), m)
end

-- promote makes at most chunk due scheduled jobs of queue q available;
-- it returns true when there may be more. It writes at once: a claim
-- reads the available index next.
local function promote(E, q, nowUs, chunk)
	local sk, ak = kSc(E, q), kAv(E, q)
	local ids = redis.call('ZRANGEBYSCORE', sk, '-inf', nowUs, 'LIMIT', 0, chunk)
	if #ids > 0 then
		local add = {}
		for _, id in ipairs(ids) do
			local jak, seq, task, am = unpack(redis.call('HMGET', kJob(E, id), 'ak', 'seq', 'task', 'am'))
			add[#add + 1] = 0
			add[#add + 1] = amOf(id, jak, seq, task, am)
		end
		redis.call('ZADD', ak, unpack(add))
		redis.call('ZREM', sk, unpack(ids))
		redis.call('ZREM', kScn(E), unpack(ids))
	end
	return #ids == chunk
end

-- runAtUs is job hash jk's run_at in µs, as text: its run_at_us; in a
-- hash from before run_at_us its run_at (ns) cut to µs (as text: a double
-- would round it), and that run_at as the second value; in a hash that
-- leaves it out (store.JobFormatDefaults) its creation, cut the same way.
local function runAtUs(jk)
	local us, ns, created = unpack(redis.call('HMGET', jk, 'run_at_us', 'run_at', 'created_at'))
	if us then return us end
	if ns then return string.sub(ns, 1, -4), ns end
	if created then return string.sub(created, 1, -4) end
	return nil -- no such job
end

-- jobOf is job id's hash as scripts return it: HGETALL's fields and
-- values and, as a lean hash (store.JobFormatLean) leaves the id to its
-- key, the id.
local function jobOf(jk, id)
	local h = redis.call('HGETALL', jk)
	if #h > 0 then
		h[#h + 1] = 'id'
		h[#h + 1] = id
	end
	return h
end

-- claimJob marks the available job id (order member am of queue q)
-- running under the lease and worker, and returns its hash.
local function claimJob(E, id, q, am, leaseNs, leaseUs, worker)
	local jk = kJob(E, id)
	touch(id)
	local seq, dk, att, w = unpack(redis.call('HMGET', jk, 'seq', 'debounce_key', 'attempt', 'worker'))
	zRem(kAv(E, q), am)
	att = int(tonumber(att or '0') + 1)
	if worker ~= '' then
		redis.call('HSET', jk, 'attempt', att, 'status', 'running', 'lease_until', leaseNs, 'worker', worker)
	else
		redis.call('HSET', jk, 'attempt', att, 'status', 'running', 'lease_until', leaseNs)
		if w then redis.call('HDEL', jk, 'worker') end
	end
	move(E, id, seq, 'pending', 'running')
	zAdd(kRun(E), leaseUs, id)
	release(E, id, nil, dk)
	return jobOf(jk, id)
end

-- delJob removes a job and every index entry it has.
local function delJob(E, id)
	local jk = kJob(E, id)
	local st, q, seq, ak, task, am, uk, dk = unpack(redis.call('HMGET', jk, 'status', 'queue', 'seq', 'ak', 'task', 'am',
		'unique_key', 'debounce_key'))
	if not st then return 0 end
	redis.call('ZREM', kSt(E, st), id)
	if st == 'pending' then
		unplace(E, q, id, amOf(id, ak, seq, task, am))
	elseif st == 'running' then
		redis.call('ZREM', kRun(E), id)
	else
		delFinished(E, id, seq, st, q)
	end
	release(E, id, uk, dk)
	redis.call('DEL', jk)
	return 1
end
`

func newScript(body string) *goredis.Script { return goredis.NewScript("#!lua\n" + luaLib + body) }

func newReadScript(body string) *goredis.Script {
	return goredis.NewScript("#!lua flags=no-writes\n" + luaLib + body)
}

// enqueueNF is the number of ARGV fields of a full item of scriptEnqueue,
// and enqueueShortNF of a short one.
const (
	enqueueNF      = 15
	enqueueShortNF = 4
)

// scriptEnqueue writes a whole JobEnqueueMany group.
// KEYS: the fence's lease, if any. ARGV: P, fence holder, fence epoch (see
// checkFence), E, ns, now (ns), now (µs), now's run_at order key, job
// record format (store.JobFormat: 1 writes ak, see amOf; 2 and 3 leave
// fields out, see F), then items. A full item has enqueueNF fields:
// kind (J new admitted, S new shed, R replay admitted, X replay shed), id,
// queue, task, has payload, payload, priority, run_at (µs, the hash's
// run_at_us), max_attempts, unique key, debounce key, due (1: available
// now), scheduled score (µs), order-key prefix (priority and run_at, 32
// hex), extra (the shed error for S and X; 1 for an auto-retry R). G is
// a J whose id FlexiQ generated and that holds neither key: see
// "Generated ids" in the script. A short item, enqueueShortNF fields, is a
// new job with neither key whose other settings are the last full item's
// (its queue, task, priority, run_at, max_attempts and extra): kind (j
// admitted, g admitted with a generated id, s shed), id, has payload,
// payload. What a batch's jobs share is then sent, and made a
// Lua string, once rather than once a job. A job hash written before
// run_at_us has run_at (ns) instead; a script that sets run_at_us drops
// it.
// Returns the items' outcomes as one string, a letter an item (e
// enqueued, d deduplicated, c coalesced, s shed, - none: a replay of
// what is no longer a dead letter), then the ids of the items answered
// with another job's id (a unique or debounce key's holder), in item
// order: such an item's letter is upper-case. One string rather than an
// outcome and an id an item: a reply of a thousand jobs was two thousand
// strings for Redis to make and the node to read, nearly all of them
// "enqueued" and the id the node sent.
var scriptEnqueue = newScript(`
local fenced = checkFence()
if fenced then return fenced end
local E, ns, now, nowUs, nowRk, format = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local compact = format >= 1
local SHED_META = '{"shed":"quota"}'
local out, held = {}, {}
local CODE = {enqueued = 'e', deduplicated = 'd', coalesced = 'c', shed = 's', [''] = '-'}
gather = true

-- New jobs take their seq from one INCRBY for the group, in item order;
-- an item that writes no job leaves its number unused.
local SHORT = {j = 'J', s = 'S', g = 'G'}
local nNew, nArgs = 0, #ARGV
do
	local b = 10
	while b <= nArgs do
		local kind = ARGV[b]
		if SHORT[kind] then
			nNew, b = nNew + 1, b + 4 -- enqueueShortNF
		else
			if kind == 'J' or kind == 'S' or kind == 'G' then nNew = nNew + 1 end
			b = b + 15 -- enqueueNF
		end
	end
end
local nextSeq = 0
if nNew > 0 then nextSeq = redis.call('INCRBY', P .. 'seq', nNew) - nNew end

-- Generated ids (G items). An id FlexiQ made is never made again, so
-- such a job's key can only exist if this very group was written before:
-- the same script sent again, or a run of it that failed part-way (a
-- script's writes before an error stay). Either way the group's first G
-- item was written first of its G items (they hold no key, so nothing
-- but an existing key stops one), so its key alone is asked for; when it
-- exists, every item's is, as for client ids. One EXISTS a group instead
-- of one a job: Redis's time for batched jobs 1.6 % less (docs/performance.md,
-- "Redis").
local genAsked, genRepeat = false, false
local function stored(kind, jk)
	if kind == 'G' then
		if genAsked and not genRepeat then return false end
		local e = redis.call('EXISTS', jk) == 1
		if not genAsked then genAsked, genRepeat = true, e end
		return e
	end
	return redis.call('EXISTS', jk) == 1
end

-- F is every new job's hash fields, made once: fill sets what differs
-- from job to job and insert returns how many of F's fields the job has;
-- the callers append the rest, and write unpack(F, 1, n). A lean hash
-- (store.JobFormatLean) leaves out what its key holds (namespace, id),
-- what its order key ak holds (priority: its first 16 hex digits) and
-- the attempt while it is 0: Redis writes each field of a new hash on
-- its own, and these four were a third of a batched job's hash write.
-- From store.JobFormatDefaults it also leaves out max_attempts while 0
-- and run_at_us while it is the job's creation (now, to the µs): most
-- jobs are due at once. Readers add the id (jobOf) and the rest
-- (jobFromMap, runAtUs).
local F, fill
if format >= 3 then
	F = {'queue', '', 'task', '', 'status', '', 'created_at', now, 'seq', '', '', ''}
	fill = function(id, q, task, prio, runAt, maxAtt, status, seq, of, ov)
		F[2], F[4], F[6], F[10], F[11], F[12] = q, task, status, seq, of, ov
		local n = 12
		if runAt ~= nowUs then
			F[n + 1], F[n + 2], n = 'run_at_us', runAt, n + 2
		end
		if maxAtt ~= '0' then
			F[n + 1], F[n + 2], n = 'max_attempts', maxAtt, n + 2
		end
		return n
	end
elseif format >= 2 then
	F = {'queue', '', 'task', '', 'run_at_us', '', 'max_attempts', '', 'status', '', 'created_at', now, 'seq', '', '', ''}
	fill = function(id, q, task, prio, runAt, maxAtt, status, seq, of, ov)
		F[2], F[4], F[6], F[8], F[10], F[14], F[15], F[16] = q, task, runAt, maxAtt, status, seq, of, ov
		return 16
	end
else
	F = {'namespace', ns, 'id', '', 'queue', '', 'task', '', 'priority', '', 'run_at_us', '',
		'max_attempts', '', 'attempt', '0', 'status', '', 'created_at', now, 'seq', '', '', ''}
	fill = function(id, q, task, prio, runAt, maxAtt, status, seq, of, ov)
		F[4], F[6], F[8], F[10], F[12], F[14], F[18], F[22], F[23], F[24] = id, q, task, prio, runAt, maxAtt, status, seq, of, ov
		return 24
	end
end
local function insert(id, q, task, hasPl, pl, prio, runAt, maxAtt, pre, status)
	nextSeq = nextSeq + 1
	local seq = int(nextSeq)
	local am = amOf(id, pre, nextSeq, task)
	local of, ov = orderField(compact, pre, am)
	local n = fill(id, q, task, prio, runAt, maxAtt, status, seq, of, ov)
	if hasPl == '1' then
		F[n + 1], F[n + 2] = 'payload', pl
		return seq, am, n + 2
	end
	return seq, am, n
end

-- The settings of the last full item, which short items share.
local q, task, prio, runAt, maxAtt, due, score, pre, extra
local b = 10
while b <= nArgs do
	local kind, id, hasPl, pl, uk, dk = ARGV[b], ARGV[b + 1]
	if SHORT[kind] then
		kind, hasPl, pl, uk, dk = SHORT[kind], ARGV[b + 2], ARGV[b + 3], '', ''
		b = b + 4 -- enqueueShortNF
	else
		q, task, hasPl, pl = ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
		prio, runAt, maxAtt, uk, dk = ARGV[b + 6], ARGV[b + 7], ARGV[b + 8], ARGV[b + 9], ARGV[b + 10]
		due, score, pre, extra = ARGV[b + 11], ARGV[b + 12], ARGV[b + 13], ARGV[b + 14]
		b = b + 15 -- enqueueNF
	end
	local jk = kJob(E, id)
	local outcome, rid = '', id

	if kind == 'J' or kind == 'G' then
		local holder = false
		if stored(kind, jk) then
			outcome = 'deduplicated'
		else
			if uk ~= '' then holder = redis.call('HGET', kUk(E), uk) end
			if holder then
				outcome, rid = 'deduplicated', holder
			else
				if dk ~= '' then holder = redis.call('HGET', kDk(E), dk) end
				if holder then
					ungathered(function()
						local hk = kJob(E, holder)
						local hq, hak, hseq, htask, ham = unpack(redis.call('HMGET', hk, 'queue', 'ak', 'seq', 'task', 'am'))
						local nak = rekey(hak or ham, string.sub(pre, 17, 32))
						local nam = amOf(holder, nak, hseq, htask)
						local of, ov, other = orderField(compact, nak, nam)
						unplace(E, hq, holder, amOf(holder, hak, hseq, htask, ham))
						place(E, hq, holder, nam, due, score)
						redis.call('HSET', hk, 'run_at_us', runAt, of, ov)
						redis.call('HDEL', hk, 'run_at', other)
						if hasPl == '1' then
							redis.call('HSET', hk, 'payload', pl)
						else
							redis.call('HDEL', hk, 'payload')
						end
					end)
					outcome, rid = 'coalesced', holder
				else
					local seq, am, n = insert(id, q, task, hasPl, pl, prio, runAt, maxAtt, pre, 'pending')
					if uk ~= '' then
						F[n + 1], F[n + 2], n = 'unique_key', uk, n + 2
						redis.call('HSET', kUk(E), uk, id)
					end
					if dk ~= '' then
						F[n + 1], F[n + 2], n = 'debounce_key', dk, n + 2
						redis.call('HSET', kDk(E), dk, id)
					end
					redis.call('HSET', jk, unpack(F, 1, n))
					zAdd(kSt(E, 'pending'), seq, id)
					place(E, q, id, am, due, score)
					outcome = 'enqueued'
				end
			end
		end

	elseif kind == 'S' then
		outcome = 'shed'
		if redis.call('EXISTS', jk) == 0 then
			local seq, am, n = insert(id, q, task, hasPl, pl, prio, runAt, maxAtt, pre, 'dead')
			for _, v in ipairs({'error', extra, 'dead_meta', SHED_META, 'finished_at', now, 'shed', '1'}) do
				n = n + 1
				F[n] = v
			end
			redis.call('HSET', jk, unpack(F, 1, n))
			zAdd(kSt(E, 'dead'), seq, id)
			addFinished(E, id, seq, 'dead', q, nowUs, false)
		end

	elseif kind == 'R' then
		ungathered(function()
			local st, jq, seq, ak, jtask, am, juk = unpack(redis.call('HMGET', jk, 'status', 'queue', 'seq', 'ak', 'task', 'am', 'unique_key'))
			if st == 'dead' then
				local holder = false
				if juk then holder = redis.call('HGET', kUk(E), juk) end
				if holder then
					outcome, rid = 'deduplicated', holder
				else
					local nak = rekey(ak or am, nowRk)
					local nam = amOf(id, nak, seq, jtask)
					local of, ov, other = orderField(compact, nak, nam)
					delFinished(E, id, seq, 'dead', jq)
					redis.call('HDEL', jk, 'error', 'dead_meta', 'finished_at', 'lease_until', 'worker', 'result',
						'shed', 'no_retry', 'debounce_key', 'run_at', other)
					redis.call('HSET', jk, 'status', 'pending', 'attempt', '0', 'run_at_us', nowUs, of, ov)
					if extra == '1' then redis.call('HINCRBY', jk, 'dead_replays', 1) end
					move(E, id, seq, 'dead', 'pending')
					redis.call('ZADD', kAv(E, jq), 0, nam)
					if juk then redis.call('HSET', kUk(E), juk, id) end
					outcome = 'enqueued'
				end
			end
		end)

	elseif kind == 'X' then
		ungathered(function()
			local st, jq, seq = unpack(redis.call('HMGET', jk, 'status', 'queue', 'seq'))
			if st == 'dead' then
				redis.call('HSET', jk, 'shed', '1', 'error', extra, 'dead_meta', SHED_META)
				redis.call('HDEL', jk, 'unique_key', 'debounce_key')
				redis.call('ZREM', kRt(E, jq), hex16(seq) .. id)
				outcome = 'shed'
			end
		end)
	end
	local code = CODE[outcome]
	if rid ~= id then
		code = string.upper(code)
		held[#held + 1] = rid
	end
	out[#out + 1] = code
end
zFlush()
table.insert(held, 1, table.concat(out))
return held
`)

// scriptPromote makes due scheduled jobs of the queues available, at most
// chunk per queue and call (0: none, the caller knows none is due), and
// returns more (1: call again) followed by the head of each queue's
// available index, page members long. A claim's first script, it checks
// the claim's fence.
// KEYS: the fence's lease, if any. ARGV: P, fence holder, fence epoch (see
// checkFence), E, now (µs), chunk, page, queues…
var scriptPromote = newScript(`
local fenced = checkFence()
if fenced then return fenced end
local E, nowUs, chunk, page = ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local out = {0}
for i = 8, #ARGV do
	local q = ARGV[i]
	if chunk > 0 and promote(E, q, nowUs, chunk) then out[1] = 1 end
	out[#out + 1] = redis.call('ZRANGE', kAv(E, q), '-', '+', 'BYLEX', 'LIMIT', 0, page)
end
return out
`)

// scriptClaim claims exactly the chosen jobs, or nothing when one of them
// is no longer available.
// KEYS: the fence's lease, if any. ARGV: P, fence holder, fence epoch (see
// checkFence), E, number of claims, then per claim: jobs, lease (ns), lease
// (µs), worker; then per job: id, queue, order member.
// Returns {'conflict', id} or {'ok', job fields…}.
var scriptClaim = newScript(`
local fenced = checkFence()
if fenced then return fenced end
local E, nc = ARGV[4], tonumber(ARGV[5])
local jb = 6 + nc * 4
for b = jb, #ARGV, 3 do
	if not redis.call('ZSCORE', kAv(E, ARGV[b + 1]), ARGV[b + 2]) then return {'conflict', ARGV[b]} end
end
local out = {'ok'}
local b = jb
gather = true
for c = 0, nc - 1 do
	local cb = 6 + c * 4
	local n, leaseNs, leaseUs, worker = tonumber(ARGV[cb]), ARGV[cb + 1], ARGV[cb + 2], ARGV[cb + 3]
	for _ = 1, n do
		out[#out + 1] = claimJob(E, ARGV[b], ARGV[b + 1], ARGV[b + 2], leaseNs, leaseUs, worker)
		b = b + 3
	end
end
zFlush()
return out
`)

// scriptClaimHead hands out the head of one queue, for a group
// OneQueueUngated allows: it makes the queue's due scheduled jobs
// available (at most chunk, 0: none is due), then gives claim after claim
// the next available jobs in dispatch order, each up to its number.
// KEYS: the fence's lease, if any. ARGV: P, fence holder, fence epoch (see
// checkFence), E, now (µs), chunk, queue, number of claims, then per
// claim: jobs, lease (ns), lease (µs), worker.
// Returns {'more'} when promotion stopped at chunk (call again), else
// {'ok', job fields…}, the jobs in the order the claims took them.
var scriptClaimHead = newScript(`
local fenced = checkFence()
if fenced then return fenced end
local E, nowUs, chunk, q, nc = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8])
if chunk > 0 and promote(E, q, nowUs, chunk) then return {'more'} end
local total = 0
for c = 0, nc - 1 do total = total + tonumber(ARGV[9 + c * 4]) end
local head = redis.call('ZRANGE', kAv(E, q), '-', '+', 'BYLEX', 'LIMIT', 0, total)
local out = {'ok'}
local k = 1
gather = true
for c = 0, nc - 1 do
	local cb = 9 + c * 4
	local n, leaseNs, leaseUs, worker = tonumber(ARGV[cb]), ARGV[cb + 1], ARGV[cb + 2], ARGV[cb + 3]
	for _ = 1, n do
		local am = head[k]
		if not am then break end
		k = k + 1
		-- The member ends with the task's length (4 hex), the task, the id.
		local id = string.sub(am, 53 + tonumber(string.sub(am, 49, 52), 16))
		out[#out + 1] = claimJob(E, id, q, am, leaseNs, leaseUs, worker)
	end
end
zFlush()
return out
`)

// updateNF is the number of ARGV fields per update of scriptUpdate.
const updateNF = 13

// scriptUpdate applies a JobUpdateMany group.
// KEYS: the fence's lease, if any. ARGV: P, fence holder, fence epoch (see
// checkFence), E, now (ns), now (µs), job record format (1 or more:
// write ak, see amOf),
// then per update: id, attempt, kind (C complete, R retry, D dead, X
// extend, G release), has result, result, error, run_at
// (µs), due, scheduled score, run_at order key, lease (ns), lease (µs),
// no_retry (G, release, uses none of the last seven: the job keeps its
// run_at and order key). Returns 1 (applied) or 0 per update.
var scriptUpdate = newScript(`
local fenced = checkFence()
if fenced then return fenced end
local E, now, nowUs, compact = ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]) >= 1
local out = {}
gather = true
for b = 8, #ARGV - 12, 13 do -- updateNF fields an update
	local id, att, kind, hasRes, res, err = ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
	local runAt, due, score, rk = ARGV[b + 6], ARGV[b + 7], ARGV[b + 8], ARGV[b + 9]
	local leaseNs, leaseUs, noRetry = ARGV[b + 10], ARGV[b + 11], ARGV[b + 12]
	local jk = kJob(E, id)
	touch(id)
	local st, cur, q, seq, ak, task, am, uk, dk = unpack(redis.call('HMGET', jk, 'status', 'attempt', 'queue', 'seq', 'ak', 'task', 'am',
		'unique_key', 'debounce_key'))
	if st ~= 'running' or cur ~= att then
		out[#out + 1] = 0
	else
		if kind == 'X' then
			redis.call('HSET', jk, 'lease_until', leaseNs)
			zAdd(kRun(E), leaseUs, id)
		elseif kind == 'C' then
			zRem(kRun(E), id)
			if hasRes == '1' then
				redis.call('HSET', jk, 'status', 'completed', 'finished_at', now, 'result', res)
				redis.call('HDEL', jk, 'lease_until')
			else
				redis.call('HSET', jk, 'status', 'completed', 'finished_at', now)
				redis.call('HDEL', jk, 'lease_until', 'result')
			end
			move(E, id, seq, 'running', 'completed')
			addFinished(E, id, seq, 'completed', q, nowUs, false)
			release(E, id, uk, nil)
		else
			zRem(kRun(E), id)
			redis.call('HDEL', jk, 'lease_until')
			if kind == 'G' then
				-- Given back unstarted: its attempt, run_at, error and
				-- place in claim order (its member) as before the claim.
				local ra, oldNs = runAtUs(jk)
				if oldNs then
					redis.call('HSET', jk, 'run_at_us', ra)
					redis.call('HDEL', jk, 'run_at')
				end
				redis.call('HSET', jk, 'status', 'pending', 'attempt', tonumber(cur) - 1)
				redis.call('HDEL', jk, 'worker')
				move(E, id, seq, 'running', 'pending')
				local isDue = '0'
				if tonumber(ra) <= tonumber(nowUs) then isDue = '1' end
				place(E, q, id, amOf(id, ak, seq, task, am), isDue, ra)
				if dk and redis.call('HSETNX', kDk(E), dk, id) == 0 then
					redis.call('HDEL', jk, 'debounce_key')
				end
			else
				if err ~= '' then
					redis.call('HSET', jk, 'error', err)
				else
					redis.call('HDEL', jk, 'error')
				end
				if kind == 'D' then
					redis.call('HSET', jk, 'status', 'dead', 'finished_at', now)
					if noRetry == '1' then
						redis.call('HSET', jk, 'no_retry', '1')
					else
						redis.call('HDEL', jk, 'no_retry')
					end
					move(E, id, seq, 'running', 'dead')
					addFinished(E, id, seq, 'dead', q, nowUs, noRetry ~= '1')
					release(E, id, uk, nil)
				else
					local nak = rekey(ak or am, rk)
					local nam = amOf(id, nak, seq, task)
					local of, ov, other = orderField(compact, nak, nam)
					redis.call('HSET', jk, 'status', 'pending', 'run_at_us', runAt, of, ov)
					redis.call('HDEL', jk, 'worker', 'run_at', other)
					move(E, id, seq, 'running', 'pending')
					place(E, q, id, nam, due, score)
					-- Pending again, it takes its debounce key back unless a
					-- newer pending job holds it; then it keeps none.
					if dk and redis.call('HSETNX', kDk(E), dk, id) == 0 then
						redis.call('HDEL', jk, 'debounce_key')
					end
				end
			end
		end
		out[#out + 1] = 1
	end
end
zFlush()
return out
`)

// scriptList lists a namespace's jobs newest first, merging the per-status
// indexes by seq. ARGV: P, E, max score ('+inf' or '(' seq), limit (0: no
// limit), queue (empty: any), shed (empty: any, 1, 0), statuses….
var scriptList = newReadScript(`
local E, max, limit, queue, shed = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local PAGE = 200
local keys, bufs, pos, last, done = {}, {}, {}, {}, {}
for i = 7, #ARGV do keys[#keys + 1] = kSt(E, ARGV[i]) end
local function fill(i)
	local hi = max
	if last[i] then hi = '(' .. last[i] end
	local r = redis.call('ZREVRANGEBYSCORE', keys[i], hi, '-inf', 'WITHSCORES', 'LIMIT', 0, PAGE)
	bufs[i], pos[i], done[i] = r, 1, #r < 2 * PAGE
	if #r > 0 then last[i] = r[#r] end
end
for i = 1, #keys do fill(i) end
local out = {}
while limit == 0 or #out < limit do
	local best, bs = nil, nil
	for i = 1, #keys do
		if pos[i] > #bufs[i] and not done[i] then fill(i) end
		if pos[i] <= #bufs[i] then
			local sc = tonumber(bufs[i][pos[i] + 1])
			if not best or sc > bs then best, bs = i, sc end
		end
	end
	if not best then break end
	local id = bufs[best][pos[best]]
	pos[best] = pos[best] + 2
	local jk = kJob(E, id)
	local ok = true
	if queue ~= '' or shed ~= '' then
		local q, sh = unpack(redis.call('HMGET', jk, 'queue', 'shed'))
		if (queue ~= '' and q ~= queue) or (shed == '1' and sh ~= '1') or (shed == '0' and sh == '1') then ok = false end
	end
	if ok then out[#out + 1] = jobOf(jk, id) end
end
return out
`)

// scriptListRunning returns a namespace's running jobs. ARGV: P, E.
var scriptListRunning = newReadScript(`
local E = ARGV[2]
local out = {}
for _, id in ipairs(redis.call('ZRANGE', kRun(E), 0, -1)) do
	out[#out + 1] = jobOf(kJob(E, id), id)
end
return out
`)

// scriptNextRunAt returns the run_at of the first scheduled job of each
// queue that has one, or of the namespace when no queue is given: 'u' and
// its run_at in µs (runAtUs), or 'n' and the run_at (ns) of a hash written
// before run_at_us. ARGV: P, E, queues….
var scriptNextRunAt = newReadScript(`
local E = ARGV[2]
local keys = {}
for i = 3, #ARGV do keys[#keys + 1] = kSc(E, ARGV[i]) end
if #keys == 0 then keys[1] = kScn(E) end
local out = {}
for _, k in ipairs(keys) do
	local r = redis.call('ZRANGE', k, 0, 0)
	if #r > 0 then
		local us, ns = runAtUs(kJob(E, r[1]))
		if ns then
			out[#out + 1] = 'n' .. ns
		elseif us then
			out[#out + 1] = 'u' .. us
		end
	end
end
return out
`)

// scriptDeadRetryable lists auto-retryable dead letters of a queue, oldest
// first. ARGV: P, E, queue, dead before (µs, inclusive), max replays, limit
// (0: no limit).
var scriptDeadRetryable = newReadScript(`
local E, q, before, maxR, limit = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local out = {}
local off, PAGE = 0, 200
while true do
	local ms = redis.call('ZRANGEBYSCORE', kRt(E, q), '-inf', before, 'LIMIT', off, PAGE)
	for _, m in ipairs(ms) do
		local id = string.sub(m, 17)
		local jk = kJob(E, id)
		if tonumber(redis.call('HGET', jk, 'dead_replays') or '0') < maxR then
			out[#out + 1] = jobOf(jk, id)
			if limit > 0 and #out >= limit then return out end
		end
	end
	if #ms < PAGE then return out end
	off = off + PAGE
end
`)

// scriptDeleteBefore deletes finished jobs of one status in every
// namespace but the skipped, oldest first. ARGV: P, status, before (µs,
// exclusive), limit, the most rows to look at, then each skipped
// namespace (enc).
var scriptDeleteBefore = newScript(`
local st, before, limit, scanMax = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local skip = {}
for i = 6, #ARGV do skip[ARGV[i]] = true end
-- kept: rows of skipped namespaces seen, which stay at the head of the
-- index; the next page starts past them.
local n, kept = 0, 0
while n < limit and kept + n < scanMax do
	local page = redis.call('ZRANGEBYSCORE', kFinAll(st), '-inf', '(' .. before, 'LIMIT', kept, limit - n)
	if #page == 0 then break end
	for _, m in ipairs(page) do
		local c = string.find(m, ':', 1, true)
		local e = c + tonumber(string.sub(m, 1, c - 1))
		local E = string.sub(m, 1, e)
		if skip[E] then
			kept = kept + 1
		else
			n = n + delJob(E, string.sub(m, e + 2))
			redis.call('ZREM', kFinAll(st), m)
		end
	end
end
return n
`)

// scriptDeleteOverCeiling deletes a namespace's oldest finished jobs of one
// status beyond the newest keep. ARGV: P, E, status, keep, limit (<0: no
// limit).
var scriptDeleteOverCeiling = newScript(`
local E, st, keep, limit = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local over = redis.call('ZCARD', kFin(E, st)) - keep
if limit >= 0 and over > limit then over = limit end
if over <= 0 then return 0 end
local n = 0
for _, m in ipairs(redis.call('ZRANGE', kFin(E, st), 0, over - 1)) do
	n = n + delJob(E, string.sub(m, 17))
	redis.call('ZREM', kFin(E, st), m)
end
return n
`)

// scriptSettingPut writes or deletes a setting and records its audit entry.
// ARGV: P, key, has value, value, now (ns), if revision (empty: none), audit
// (1: record), actor, action, target kind, target, namespace, E of it.
// Returns {'conflict', revision} or {'ok', new revision}.
var scriptSettingPut = newScript(`
local key, hasV, v, now, ifRev = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local sk = P .. 'set:' .. key
local before, rev = unpack(redis.call('HMGET', sk, 'value', 'rev'))
rev = tonumber(rev or '0')
if ifRev ~= '' and tonumber(ifRev) ~= rev then return {'conflict', rev} end
rev = rev + 1
redis.call('HSET', sk, 'rev', int(rev), 'updated_at', now)
if hasV == '1' then
	redis.call('HSET', sk, 'value', v)
	redis.call('ZADD', P .. 'sets', 0, key)
else
	redis.call('HDEL', sk, 'value')
	redis.call('ZREM', P .. 'sets', key)
end
if ARGV[7] == '1' then
	local id = int(redis.call('INCR', P .. 'aseq'))
	local ak = P .. 'a:' .. id
	redis.call('HSET', ak, 'id', id, 'at', now, 'actor', ARGV[8], 'action', ARGV[9], 'target_kind', ARGV[10],
		'target', ARGV[11], 'namespace', ARGV[12])
	if before then redis.call('HSET', ak, 'before', before) end
	if hasV == '1' then redis.call('HSET', ak, 'after', v) end
	redis.call('LPUSH', P .. 'al:' .. ARGV[13], id)
end
return {'ok', rev}
`)

// scriptSettingList returns live settings whose key starts with ARGV[2],
// by key: key, value, revision, updated_at for each.
var scriptSettingList = newReadScript(`
local prefix = ARGV[2]
local out = {}
for _, k in ipairs(redis.call('ZRANGEBYLEX', P .. 'sets', '[' .. prefix, '+')) do
	if string.sub(k, 1, #prefix) ~= prefix then break end
	local v, rev, at = unpack(redis.call('HMGET', P .. 'set:' .. k, 'value', 'rev', 'updated_at'))
	if v then
		out[#out + 1] = k
		out[#out + 1] = v
		out[#out + 1] = rev
		out[#out + 1] = at
	end
end
return out
`)

// scriptAuditList returns a namespace's newest audit entries.
// ARGV: P, E, limit.
var scriptAuditList = newReadScript(`
local out = {}
for _, id in ipairs(redis.call('LRANGE', P .. 'al:' .. ARGV[2], 0, tonumber(ARGV[3]) - 1)) do
	out[#out + 1] = redis.call('HGETALL', P .. 'a:' .. id)
end
return out
`)

// scriptTokenCreate stores a token unless its id or hash is taken.
// ARGV: P, id, hash, hash (hex), namespace, role, created_at (ns).
var scriptTokenCreate = newScript(`
local id, hash, hx = ARGV[2], ARGV[3], ARGV[4]
local tk, hk = P .. 't:' .. id, P .. 'th:' .. hx
if redis.call('EXISTS', tk) == 1 or redis.call('EXISTS', hk) == 1 then return 'conflict' end
redis.call('HSET', tk, 'id', id, 'hash', hash, 'hash_hex', hx, 'namespace', ARGV[5], 'role', ARGV[6], 'created_at', ARGV[7])
redis.call('SET', hk, id)
return 'ok'
`)

// scriptTokenGet returns the live token with hash (hex) ARGV[2], or nothing.
var scriptTokenGet = newReadScript(`
local id = redis.call('GET', P .. 'th:' .. ARGV[2])
if not id then return {} end
return redis.call('HGETALL', P .. 't:' .. id)
`)

// scriptTokenRevoke revokes live token ARGV[2] at ARGV[3] and returns it,
// or nothing when there is no such live token.
var scriptTokenRevoke = newScript(`
local tk = P .. 't:' .. ARGV[2]
local hx, revoked = unpack(redis.call('HMGET', tk, 'hash_hex', 'revoked_at'))
if not hx or revoked then return {} end
redis.call('HSET', tk, 'revoked_at', ARGV[3])
redis.call('DEL', P .. 'th:' .. hx)
return redis.call('HGETALL', tk)
`)

// scriptConfigPut creates or replaces a configuration item.
// ARGV: P, E, K (encoded kind), name, namespace, kind, value, now (ns),
// create (1), if revision (empty: none).
// Returns {'conflict', revision} or {'ok', item fields…}.
var scriptConfigPut = newScript(`
local E, K, name = ARGV[2], ARGV[3], ARGV[4]
local create, ifRev = ARGV[9], ARGV[10]
local suffix = E .. ':' .. K .. ':' .. name
local ck = P .. 'c:' .. suffix
local seq, rev = unpack(redis.call('HMGET', ck, 'seq', 'rev'))
local cur = tonumber(rev or '0')
if seq and create == '1' then return {'conflict', cur} end
if ifRev ~= '' and tonumber(ifRev) ~= cur then return {'conflict', cur} end
if seq then
	redis.call('HSET', ck, 'value', ARGV[7], 'rev', int(cur + 1), 'updated_at', ARGV[8])
else
	seq = int(redis.call('INCR', P .. 'cseq'))
	redis.call('HSET', ck, 'namespace', ARGV[5], 'kind', ARGV[6], 'name', name, 'value', ARGV[7], 'seq', seq,
		'rev', '1', 'updated_at', ARGV[8])
	redis.call('ZADD', P .. 'ci:' .. E .. ':' .. K, seq, name)
	redis.call('ZADD', P .. 'ck:' .. K, seq, suffix)
end
return {'ok', redis.call('HGETALL', ck)}
`)

// scriptConfigDelete removes a configuration item: 1, or 0 when there is
// none. ARGV: P, E, K, name.
var scriptConfigDelete = newScript(`
local E, K, name = ARGV[2], ARGV[3], ARGV[4]
local suffix = E .. ':' .. K .. ':' .. name
if redis.call('DEL', P .. 'c:' .. suffix) == 0 then return 0 end
redis.call('ZREM', P .. 'ci:' .. E .. ':' .. K, name)
redis.call('ZREM', P .. 'ck:' .. K, suffix)
return 1
`)

// scriptConfigList returns items in creation order: of one namespace
// (ARGV[2] = E) or, with ARGV[2] empty, of all. ARGV: P, E, K.
var scriptConfigList = newReadScript(`
local E, K = ARGV[2], ARGV[3]
local out = {}
if E == '' then
	for _, s in ipairs(redis.call('ZRANGE', P .. 'ck:' .. K, 0, -1)) do
		out[#out + 1] = redis.call('HGETALL', P .. 'c:' .. s)
	end
else
	for _, name in ipairs(redis.call('ZRANGE', P .. 'ci:' .. E .. ':' .. K, 0, -1)) do
		out[#out + 1] = redis.call('HGETALL', P .. 'c:' .. E .. ':' .. K .. ':' .. name)
	end
end
return out
`)

// scriptLeaseAcquire takes or renews leases for a holder: a lease never
// taken is created at epoch 1; one the holder holds is renewed (same
// epoch); one released or expired at now is taken (next epoch); one
// another holder holds until after now is left. Returns name, epoch of
// each lease the holder holds afterwards.
// ARGV: P, holder, now (µs), expires (µs), names… (each once).
var scriptLeaseAcquire = newScript(`
local holder, now, exp = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local out = {}
for i = 5, #ARGV do
	local name = ARGV[i]
	local k = kLease(name)
	local h, e, x = unpack(redis.call('HMGET', k, 'holder', 'epoch', 'expires'))
	if not e then
		e = '1'
		redis.call('ZADD', P .. 'leases', 0, name)
	elseif h == holder then
		-- renewed
	elseif h == '' or not x or tonumber(x) <= now then
		e = int(tonumber(e) + 1)
	else
		e = nil
	end
	if e then
		redis.call('HSET', k, 'holder', holder, 'epoch', e, 'expires', exp)
		out[#out + 1] = name
		out[#out + 1] = e
	end
end
return out
`)

// scriptLeaseRelease gives the holder's leases among names up: holder empty
// and no expiry, the epoch kept. ARGV: P, holder, names….
var scriptLeaseRelease = newScript(`
local holder = ARGV[2]
for i = 3, #ARGV do
	local k = kLease(ARGV[i])
	if redis.call('HGET', k, 'holder') == holder then
		redis.call('HSET', k, 'holder', '')
		redis.call('HDEL', k, 'expires')
	end
end
return 0
`)

// scriptLeaseList returns name, holder, epoch, expires (µs, empty when
// released) of every lease, by name. ARGV: P.
var scriptLeaseList = newReadScript(`
local out = {}
for _, name in ipairs(redis.call('ZRANGE', P .. 'leases', 0, -1)) do
	local h, e, x = unpack(redis.call('HMGET', kLease(name), 'holder', 'epoch', 'expires'))
	out[#out + 1] = name
	out[#out + 1] = h or ''
	out[#out + 1] = e or '0'
	out[#out + 1] = x or ''
end
return out
`)

// scriptMemberHeartbeat records a node as live until its expiry, drops the
// members whose expiry is not after now, and returns node, info, expiry
// (µs) of each live member.
// ARGV: P, node, info (JSON), expires (µs), now (µs).
var scriptMemberHeartbeat = newScript(`
local node, info, exp, now = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local mk, ik = P .. 'members', P .. 'members:info'
redis.call('ZADD', mk, exp, node)
redis.call('HSET', ik, node, info)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', mk, '-inf', now)) do
	redis.call('ZREM', mk, gone)
	redis.call('HDEL', ik, gone)
end
local out = {}
local live = redis.call('ZRANGEBYSCORE', mk, '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
	out[#out + 1] = live[i]
	out[#out + 1] = redis.call('HGET', ik, live[i]) or '{}'
	out[#out + 1] = live[i + 1]
end
return out
`)

// scriptMemberLeave removes a node. ARGV: P, node.
var scriptMemberLeave = newScript(`
redis.call('ZREM', P .. 'members', ARGV[2])
redis.call('HDEL', P .. 'members:info', ARGV[2])
return 0
`)
