"""The Lua scripts of the Redis job store: each makes one step of a job atomic in Redis."""

# KEYS: job hash, events stream, owner-active set, checkpoint, lease, owner's usage hash of the day,
#       owner's storage counter of today, the job's batch hash and batch job list, the owner's listing
#       indexes of jobs and of batches (the batch keys are not read when the job has no batch).
# ARGV: to-status ('' = keep), allowed-from (comma list), event type ('' = none), event data,
#       now, ttl seconds, job id, then field/value pairs.
# Returns the event id (or "ok" when no event), or false when the job is missing or the transition
# is not allowed from its current status.
#
# Retention: every write restarts the job's ``ttl`` (an unfinished job is also kept alive by the
# workers' sweep, KEEP_ALIVE_LUA), and what lists or groups the job (its batch, the owner's listing
# indexes) is kept at least as long as the job when it finishes. What only a running job needs is
# deleted when it finishes: its checkpoint, its lease and the knowledge pool a client brought (the
# result carries the pool).
TRANSITION_LUA = """
local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return false end
if not string.find(',' .. ARGV[2] .. ',', ',' .. cur .. ',', 1, true) then return false end
local to = ARGV[1]
if to ~= '' then
  redis.call('HSET', KEYS[1], 'status', to, 'updated_at', ARGV[5])
end
for i = 8, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
local out = 'ok'
if ARGV[3] ~= '' then
  out = redis.call('XADD', KEYS[2], 'MAXLEN', '~', '10000', '*', 'type', ARGV[3], 'data', ARGV[4])
end
local ttl = tonumber(ARGV[6])
local terminal = to == 'completed' or to == 'failed' or to == 'cancelled'
if terminal then
  redis.call('SREM', KEYS[3], ARGV[7])
  redis.call('HSET', KEYS[1], 'finished_at', ARGV[5])
  redis.call('DEL', KEYS[4], KEYS[5])
  redis.call('HDEL', KEYS[1], 'pool')
  -- The tokens it used were charged call by call (CHARGE_LUA); what is left of its reservation
  -- is given back here, exactly once (terminal states are never left).
  -- Nothing is drawn from it any more either, so a call settling later gives nothing back to it.
  local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved_tokens') or '0') or 0
  if reserved > 0 then
    redis.call('HINCRBY', KEYS[6], 'reserved', -reserved)
  end
  redis.call('HSET', KEYS[1], 'reserved_tokens', '0', 'drawn_tokens', '0')
  redis.call('HINCRBY', KEYS[6], 'jobs_' .. to, 1)
  redis.call('EXPIRE', KEYS[6], 8 * 86400)
  if ttl > 0 then
    local extend = {KEYS[10]}
    local batch = redis.call('HGET', KEYS[1], 'batch_id')
    if batch and batch ~= '' then
      extend = {KEYS[8], KEYS[9], KEYS[10], KEYS[11]}
    end
    for _, key in ipairs(extend) do
      local left = redis.call('TTL', key)
      if left ~= -2 and left < ttl then redis.call('EXPIRE', key, ttl) end
    end
  end
end
if ttl > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
  if not terminal then redis.call('EXPIRE', KEYS[4], ttl) end
end
-- Storage accounting: the bytes this step wrote, on the owner's counter of the day.
local written = 0
if ARGV[3] ~= '' then written = written + #ARGV[4] + 64 end
for i = 8, #ARGV, 2 do
  written = written + #ARGV[i] + #ARGV[i + 1]
end
if written > 0 then
  redis.call('INCRBY', KEYS[7], written)
  redis.call('EXPIRE', KEYS[7], ttl + 86400)
end
return out
"""

# KEYS: job hash, events stream. ARGV: the packed events, the id of the last event packed, grace ms.
# Packs a finished job's event stream into its record (``events_z``): a stream costs at least one
# 4 KB node in Redis whatever it holds, the packed events a tenth of that. Only a finished job's, and
# only if the stream still ends with the event packed last (nothing is added after the terminal
# event, so this holds unless the stream is gone). The stream itself lapses ``grace`` later, so a
# reader that found it a moment ago and is about to wait on it still sees its last events.
COMPACT_LUA = """
local cur = redis.call('HGET', KEYS[1], 'status')
if cur ~= 'completed' and cur ~= 'failed' and cur ~= 'cancelled' then return 0 end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #last == 0 or last[1][1] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'events_z', ARGV[1])
local left = redis.call('PTTL', KEYS[2])
if left < 0 or left > tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
return 1
"""

# KEYS: events stream, job hash. ARGV: after (exclusive stream id), count.
# The events after ``after`` without waiting: from the stream while it exists, else the packed
# events of a finished job (the caller unpacks and filters them), else nothing.
READ_EVENTS_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'stream', redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])}
end
local packed = redis.call('HGET', KEYS[2], 'events_z')
if packed then return {'packed', packed} end
return {'none', {}}
"""

# KEYS: job hash, checkpoint, the owner's storage counter of today. ARGV: checkpoint, ttl seconds,
# bytes to count, the unfinished statuses (comma list). Only an unfinished job's checkpoint is
# written: one saved by a worker that has not yet noticed the job was cancelled would otherwise
# outlive the job's need for it.
CHECKPOINT_LUA = """
local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return 0 end
if not string.find(',' .. ARGV[4] .. ',', ',' .. cur .. ',', 1, true) then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
redis.call('INCRBY', KEYS[3], ARGV[3])
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[2]) + 86400)
return 1
"""

# KEYS: job hash, events stream, checkpoint. ARGV: ttl seconds, the unfinished statuses (comma list).
# Restarts the retention of an unfinished job (the workers' sweep calls it for a job whose keys are
# half-way to expiring): a job queued or running longer than ``ttl`` is never lost to expiry.
KEEP_ALIVE_LUA = """
local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return 0 end
if not string.find(',' .. ARGV[2] .. ',', ',' .. cur .. ',', 1, true) then return 0 end
for _, key in ipairs(KEYS) do redis.call('EXPIRE', key, ARGV[1]) end
return 1
"""

# KEYS: job hash, the owner's usage hash of the job's day, the job's tombstone, the job's applied
# charge ids. ARGV: prompt tokens, completion tokens, calls (deltas, possibly negative), the charge's
# id ('' for none), how long to remember it (s). A charge with an id is applied once: a worker that lost
# its connection after Redis ran the script (Redis killed before it replied) sends the same charge
# again, and the second is a no-op instead of a second draw. Charges an LLM call to the job and its owner's
# day whatever the job's status (a cancelled job's calls in flight are charged too, and a deleted
# job's to its owner's day alone): the worst case before the call is sent, the difference to the real
# use when it ends.
# A running job holds exactly its reservation of the owner's quota, never more: what a charge adds
# is drawn from the job's reservation (``drawn_tokens`` records how much), and what a refund or a
# settlement takes off goes back to it, once the tokens charged beyond the reservation (a job with
# no budget reserves nothing) are paid back. A terminal status releases the reservation and clears
# what was drawn (the transition above), so nothing goes back to it after that.
CHARGE_LUA = """
local p = tonumber(ARGV[1])
local c = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local t = p + c
local live = redis.call('EXISTS', KEYS[1]) == 1
if not live and redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
if ARGV[4] ~= '' then
  if redis.call('SADD', KEYS[4], ARGV[4]) == 0 then return 1 end
  redis.call('EXPIRE', KEYS[4], tonumber(ARGV[5]))
end
if not live then
  -- A job its owner deleted: a call that was in flight still cost what it cost, so it is charged to
  -- the owner's day (its tombstone says whose); there is no record, and no reservation, left to touch.
  for _, pair in ipairs({{'tokens', t}, {'prompt_tokens', p}, {'completion_tokens', c}, {'calls', n}}) do
    redis.call('HINCRBY', KEYS[2], pair[1], pair[2])
  end
  redis.call('EXPIRE', KEYS[2], 8 * 86400)
  return 1
end
local job = redis.call('HMGET', KEYS[1], 'used_tokens', 'drawn_tokens', 'reserved_tokens')
local used = tonumber(job[1] or '0') or 0
local drawn = tonumber(job[2] or '0') or 0
local reserved = tonumber(job[3] or '0') or 0
for _, pair in ipairs({{'tokens', t}, {'prompt_tokens', p}, {'completion_tokens', c}, {'calls', n}}) do
  redis.call('HINCRBY', KEYS[1], 'used_' .. pair[1], pair[2])
  redis.call('HINCRBY', KEYS[2], pair[1], pair[2])
end
local move = 0
if t > 0 then
  move = math.min(reserved, t)
else
  move = -math.min(drawn, math.max(0, -t - (used - drawn)))
end
if move ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'reserved_tokens', -move)
  redis.call('HINCRBY', KEYS[1], 'drawn_tokens', move)
  redis.call('HINCRBY', KEYS[2], 'reserved', -move)
end
redis.call('EXPIRE', KEYS[2], 8 * 86400)
return 1
"""

# KEYS: usage hash. ARGV: tokens to reserve, quota (0 = none). Reserves only if used + reserved +
# the new reservation stay within the quota; 1 when reserved, 0 when refused.
RESERVE_LUA = """
local quota = tonumber(ARGV[2])
local amount = tonumber(ARGV[1])
if quota > 0 then
  local used = tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0') or 0
  local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0') or 0
  if used + reserved + amount > quota then return 0 end
end
redis.call('HINCRBY', KEYS[1], 'reserved', amount)
redis.call('EXPIRE', KEYS[1], 8 * 86400)
return 1
"""

# KEYS: lease. ARGV: token, ttl ms. Takes a free lease or renews our own; false if another holds it.
LEASE_LUA = """
local cur = redis.call('GET', KEYS[1])
if (not cur) or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

# KEYS: job hash. ARGV: delta. Counts a delivery of a job (``attempts``) only while its record exists:
# a plain HINCRBY on a deleted job would create a record of one field.
ATTEMPTS_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('HINCRBY', KEYS[1], 'attempts', ARGV[1])
"""

# Takes ``amount`` bytes off a storage counter, never below zero, keeping its expiry: what a removed
# record was counted there. (Shared by the two removal scripts below.)
_TAKE_OFF = """
local function take_off(key, amount)
  local have = tonumber(redis.call('GET', key) or '0') or 0
  local take = math.min(tonumber(amount) or 0, have)
  if take > 0 then redis.call('DECRBY', key, take) end
end
"""

# KEYS: job hash, events stream, checkpoint, lease, the owner's active set, the owner's listing index of
# jobs, the job's tombstone, the owner's storage counter of the day the job was stored, and of the day
# it finished. ARGV: job id, ttl seconds, bytes to take off each of the two counters, the terminal
# statuses (comma list).
# Removes a finished job for good (a client's DELETE; an unfinished one is cancelled first, so its
# worker stops): every key of it, its place in the listing, and what it was counted in the owner's
# storage. It leaves a tombstone naming the owner and the usage day, for ``ttl``: a worker's call that
# was in flight is still charged to the owner (CHARGE_LUA), while every other write of a worker (a
# transition, an event, progress, a checkpoint, an attempt) finds no record and writes nothing, so the
# job is never re-created. Returns 1 when removed, 0 when the job is missing or not finished.
REMOVE_JOB_LUA = (
    _TAKE_OFF
    + """
local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return 0 end
if not string.find(',' .. ARGV[5] .. ',', ',' .. cur .. ',', 1, true) then return 0 end
local who = redis.call('HMGET', KEYS[1], 'owner', 'usage_day')
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
redis.call('SREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('HSET', KEYS[7], 'owner', who[1] or '', 'usage_day', who[2] or '')
redis.call('EXPIRE', KEYS[7], ARGV[2])
take_off(KEYS[8], ARGV[3])
take_off(KEYS[9], ARGV[4])
return 1
"""
)

# KEYS: batch hash, the batch's job list, the owner's listing index of batches, the owner's storage
# counter of the day the batch was stored. ARGV: batch id, bytes to take off the counter.
# Removes a batch record whose items are gone (REMOVE_JOB_LUA, each). Returns 1 when removed, 0 when
# the batch is missing.
REMOVE_BATCH_LUA = (
    _TAKE_OFF
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
take_off(KEYS[4], ARGV[2])
return 1
"""
)
