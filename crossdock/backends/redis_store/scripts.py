"""Lua scripts for the store's atomic multi-key steps. Each header names its KEYS and ARGV."""

NEXT_EVENT_ID = """
-- next_event_id: the id of a job's next event, '<ms>-<seq>' as a stream's, strictly after the job's
-- last one (its list's last, else its hash's first event 'ev0'): '<now>-0' when now is later, else
-- the last's milliseconds with the next seq, so that events of one millisecond, or of a clock that
-- went back, stay unique and in order. hash: job hash; list: job event list; now_ms: "" = Redis TIME.
local function next_event_id(hash, list, now_ms)
  local ms = tonumber(now_ms)
  if not ms then
    local t = redis.call('TIME')
    ms = t[1] * 1000 + math.floor(t[2] / 1000)
  end
  local last = redis.call('LINDEX', list, -1) or redis.call('HGET', hash, 'ev0')
  if last then
    local ok, decoded = pcall(cjson.decode, last)
    local lms, lseq = string.match(ok and type(decoded) == 'table' and tostring(decoded.id) or '', '^(%d+)-(%d+)$')
    if lms and tonumber(lms) >= ms then return lms .. '-' .. string.format('%d', tonumber(lseq) + 1) end
  end
  return string.format('%d-0', ms)
end
"""

TRANSITION = NEXT_EVENT_ID + """
-- transition: move one job to a new state if its current state allows it, and record the event.
-- KEYS[1] job hash   KEYS[2] pending zset   KEYS[3] active zset
-- KEYS[4] job event list (a stream for jobs stored before lists)   KEYS[5] global event stream
-- ARGV[1] job id   ARGV[2] new state   ARGV[3] allowed old states, space-separated
-- ARGV[4] JSON object of fields to set ("" deletes the field)   ARGV[5] JSON object of event fields
-- ARGV[6] stream max length   ARGV[7] required attempts value ("" = any)
-- ARGV[8] a field that must be unset ("" = none)   ARGV[9] "1" to increment attempts
-- KEYS[6] finished zset   ARGV[10] "1" when the new state is terminal   ARGV[11] now (epoch seconds)
-- ARGV[12] a requeue: JSON object of the ended attempt's end_time (when the hash has none) and, where
--   they are not the old state and this event's reason, its state and reason ("" = not a requeue)
-- ARGV[13] how many ended attempts the job keeps   ARGV[14] the ended attempt's fields, space-separated
-- returns {1, old state} when moved, {0, old state or "missing"} when refused
local old = redis.call('HGET', KEYS[1], 'state')
if not old then return {0, 'missing'} end
if not string.find(' ' .. ARGV[3] .. ' ', ' ' .. old .. ' ', 1, true) then return {0, old} end
if ARGV[7] ~= '' and redis.call('HGET', KEYS[1], 'attempts') ~= ARGV[7] then return {0, old} end
if ARGV[8] ~= '' and redis.call('HEXISTS', KEYS[1], ARGV[8]) == 1 then return {0, old} end
local attempt = redis.call('HGET', KEYS[1], 'attempts') or '0'
if ARGV[12] ~= '' and attempt ~= '0' then
  -- a requeue ends this attempt: keep what it was (sacct -D's row) before its fields are cleared
  local ends = cjson.decode(ARGV[12])
  local ended = {attempt = attempt, state = ends.state or old, reason = ends.reason or cjson.decode(ARGV[5]).reason}
  for name in string.gmatch(ARGV[14], '%S+') do
    local v = redis.call('HGET', KEYS[1], name)
    if v and v ~= '' then ended[name] = v end
  end
  if not ended.end_time then ended.end_time = ends.end_time end
  local raw = redis.call('HGET', KEYS[1], 'past_attempts')
  local past = raw and cjson.decode(raw) or {}
  table.insert(past, ended)
  while #past > tonumber(ARGV[13]) do table.remove(past, 1) end
  redis.call('HSET', KEYS[1], 'past_attempts', cjson.encode(past))
end
for k, v in pairs(cjson.decode(ARGV[4])) do
  if v == '' then redis.call('HDEL', KEYS[1], k) else redis.call('HSET', KEYS[1], k, v) end
end
if ARGV[9] == '1' then redis.call('HINCRBY', KEYS[1], 'attempts', 1) end
local new = ARGV[2]
redis.call('HSET', KEYS[1], 'state', new)
if new == 'PENDING' then redis.call('ZADD', KEYS[2], ARGV[1], ARGV[1]) else redis.call('ZREM', KEYS[2], ARGV[1]) end
if new == 'SCHEDULED' or new == 'RUNNING' then
  redis.call('ZADD', KEYS[3], ARGV[1], ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
if ARGV[10] == '1' then redis.call('ZADD', KEYS[6], ARGV[11], ARGV[1]) else redis.call('ZREM', KEYS[6], ARGV[1]) end
local flat = {'from', old, 'to', new}
local ev = {['from'] = old, to = new}
for k, v in pairs(cjson.decode(ARGV[5])) do
  table.insert(flat, k); table.insert(flat, tostring(v)); ev[k] = tostring(v)
end
if redis.call('TYPE', KEYS[4]).ok == 'stream' then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', unpack(flat))
else  -- a list of JSON events: a job's few events cost bytes, where a stream costs kilobytes
  ev.id = next_event_id(KEYS[1], KEYS[4], '')
  redis.call('RPUSH', KEYS[4], cjson.encode(ev))
  redis.call('LTRIM', KEYS[4], -tonumber(ARGV[6]), -1)
end
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[6], '*', 'job', ARGV[1], unpack(flat))
return {1, old}
"""

APPEND_EVENT = NEXT_EVENT_ID + """
-- append_event: add one event to a job's own events, with the id next_event_id gives.
-- KEYS[1] job hash   KEYS[2] job event list (a stream for jobs stored before lists)
-- ARGV[1] JSON object of event fields   ARGV[2] max length   ARGV[3] now (epoch ms, "" = Redis TIME)
-- returns the event's id
local ev = {}
local flat = {}
for k, v in pairs(cjson.decode(ARGV[1])) do
  ev[k] = tostring(v); table.insert(flat, k); table.insert(flat, tostring(v))
end
if redis.call('TYPE', KEYS[2]).ok == 'stream' then
  return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(flat))
end
ev.id = next_event_id(KEYS[1], KEYS[2], ARGV[3])
redis.call('RPUSH', KEYS[2], cjson.encode(ev))
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
return ev.id
"""

UPDATE_IF = """
-- update_if: set fields on a job only while it is in one of the given states.
-- KEYS[1] job hash
-- ARGV[1] allowed states, space-separated   ARGV[2] JSON object of fields to set ("" deletes)
-- returns 1 when updated, 0 when the job is missing or in another state
local st = redis.call('HGET', KEYS[1], 'state')
if not st or not string.find(' ' .. ARGV[1] .. ' ', ' ' .. st .. ' ', 1, true) then return 0 end
for k, v in pairs(cjson.decode(ARGV[2])) do
  if v == '' then redis.call('HDEL', KEYS[1], k) else redis.call('HSET', KEYS[1], k, v) end
end
return 1
"""

LEASE = """
-- lease: take the lease if free, or extend it if this holder has it.
-- KEYS[1] lease key   ARGV[1] holder id   ARGV[2] lease length in milliseconds
-- returns 1 when held by ARGV[1] afterwards, else 0
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

RELEASE = """
-- release: drop the lease only if this holder has it.
-- KEYS[1] lease key   ARGV[1] holder id
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

ARCHIVE = """
-- archive: move one finished job out of the hot keys into a compact history record.
-- KEYS[1] job hash   KEYS[2] job event list   KEYS[3] all-jobs zset   KEYS[4] name index zset
-- KEYS[5] array zset   KEYS[6] history hash   KEYS[7] history end-time zset   KEYS[8] finished zset
-- KEYS[9] the owner's jobs zset
-- ARGV[1] job id   ARGV[2] expected state   ARGV[3] expected attempts   ARGV[4] record (JSON)
-- ARGV[5] end time (epoch seconds)
-- returns 1 when moved, 0 when the job changed meanwhile (it stays)
local st = redis.call('HGET', KEYS[1], 'state')
if st ~= ARGV[2] or (redis.call('HGET', KEYS[1], 'attempts') or '0') ~= ARGV[3] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[8], ARGV[1])
redis.call('ZREM', KEYS[9], ARGV[1])
redis.call('HSET', KEYS[6], ARGV[1], ARGV[4])
redis.call('ZADD', KEYS[7], ARGV[5], ARGV[1])
return 1
"""

SUBMIT = """
-- submit: store new jobs, whose ids the caller reserved, in one step: unless the token already
-- stored a submission, or an owner would go over the job limit (counted here, so no submission
-- of the same owner comes between the count and the write, and none has to retry).
-- KEYS[1] idempotency key (any key without a token)   KEYS[2] store format key   KEYS[3] pending zset
-- KEYS[4] active zset   KEYS[5] all-jobs zset   KEYS[6] global event stream   KEYS[7] installation key
-- KEYS[8 .. 7+owners] each owner's jobs zset; then 3 per job: its hash, its name index zset,
--   its array zset (its hash again when it is not an array task)
-- ARGV[1] "1" with a token   ARGV[2] the token's TTL (s)   ARGV[3] the ids, JSON (the token's value)
-- ARGV[4] the format to set when there is none ("" = leave it: not the store's first jobs)
-- ARGV[5] stream max length   ARGV[6] most live jobs per owner ("" = no limit)   ARGV[7] owners
-- ARGV[8] the installation record to set with the format when there is none
-- ARGV[9 .. 8+owners] the jobs each owner adds; then per job: id, its owner's number (1-based),
--   its array position ("" = none), n, n hash fields and values, m, m event fields and values
-- returns {0, ids JSON} for a token already used (its TTL renewed), {1} when stored,
--   {2, each owner's live jobs} when one would go over the limit (nothing stored)
if ARGV[1] == '1' then
  local first = redis.call('GET', KEYS[1])
  if first then
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return {0, first}
  end
end
local owners = tonumber(ARGV[7])
if ARGV[6] ~= '' then
  local live, over = {2}, false
  for o = 1, owners do
    local have = redis.call('ZINTERCARD', 2, KEYS[7 + o], KEYS[3]) + redis.call('ZINTERCARD', 2, KEYS[7 + o], KEYS[4])
    live[o + 1] = have
    if have + tonumber(ARGV[8 + o]) > tonumber(ARGV[6]) then over = true end
  end
  if over then return live end
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[2], ARGV[4], 'NX')
  redis.call('SET', KEYS[7], ARGV[8], 'NX')
end
if ARGV[1] == '1' then redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[2]) end
local a, k = 9 + owners, 8 + owners
while a <= #ARGV do
  local id, mine, pos = ARGV[a], KEYS[7 + tonumber(ARGV[a + 1])], ARGV[a + 2]
  local n = tonumber(ARGV[a + 3])
  redis.call('HSET', KEYS[k], unpack(ARGV, a + 4, a + 3 + n))
  a = a + 4 + n
  redis.call('ZADD', KEYS[5], id, id)
  redis.call('ZADD', KEYS[3], id, id)
  redis.call('ZADD', KEYS[k + 1], id, id)
  redis.call('ZADD', mine, id, id)
  if pos ~= '' then redis.call('ZADD', KEYS[k + 2], pos, id) end
  local m = tonumber(ARGV[a])
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'job', id, unpack(ARGV, a + 1, a + m))
  a = a + 1 + m
  k = k + 3
end
return {1}
"""
