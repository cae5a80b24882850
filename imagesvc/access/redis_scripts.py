"""The Lua scripts of the Redis access backend: each check-and-write is one script, atomic in Redis.

Each script's comment gives its KEYS and ARGV (as ``RedisAccess`` passes them) and its reply. Key layout and TTLs
are described in ``imagesvc.access.redis``.
"""

from __future__ import annotations

from imagesvc.access import BUCKET_SECONDS, BUDGET_WINDOW

__all__ = ["COMMIT", "EXTEND", "HIT", "METER", "REFUND", "RESERVE"]

# KEYS: usage, pending, pending expiry zset. ARGV: now, units, limit (-1: uncapped), partial (1/0), id, expires,
# key ttl ms. Returns {1, granted, remaining} or {0, used, {time in bucket, units, ...}}: every live committed bucket
# (as its start) and every pending reservation (as the time it was made, the minute its commit will count it in).
# The pending hash keeps a running "_sum" so a burst of reservations costs O(1) each, not O(pending).
RESERVE = f"""
local now, units, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1])
if #lapsed > 0 then
  for _, id in ipairs(lapsed) do
    local v = redis.call('HGET', KEYS[2], id)
    if v then
      redis.call('HINCRBY', KEYS[2], '_sum', -tonumber(string.match(v, '^%d+')))
      redis.call('HDEL', KEYS[2], id)
    end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[1])
end
local pending = tonumber(redis.call('HGET', KEYS[2], '_sum') or '0')
local used, rel = pending, {{}}
local granted, remaining = units, -1
if limit >= 0 then
  local oldest = math.floor((now - {BUDGET_WINDOW}) / {BUCKET_SECONDS})
  local u = redis.call('HGETALL', KEYS[1])
  for i = 1, #u, 2 do
    if tonumber(u[i]) < oldest then
      redis.call('HDEL', KEYS[1], u[i])
      u[i + 1] = '0'
    else
      used = used + tonumber(u[i + 1])
    end
  end
  local free = limit - used
  if ARGV[4] == '1' then granted = math.min(units, free) elseif units > free then granted = 0 end
  if granted <= 0 then
    -- refused: also return each bucket (as its start time) so the caller can say when units free up
    for i = 1, #u, 2 do
      if u[i + 1] ~= '0' then
        rel[#rel + 1] = string.format('%d', tonumber(u[i]) * {BUCKET_SECONDS})
        rel[#rel + 1] = u[i + 1]
      end
    end
    local p = redis.call('HGETALL', KEYS[2])
    for i = 1, #p, 2 do
      if p[i] ~= '_sum' then
        local n, created = string.match(p[i + 1], '^(%d+) (%S+)')
        rel[#rel + 1] = created
        rel[#rel + 1] = n
      end
    end
    return {{0, used, rel}}
  end
  remaining = free - granted
end
redis.call('HSET', KEYS[2], ARGV[5], string.format('%d', granted) .. ' ' .. ARGV[1] .. ' ' .. ARGV[6])
redis.call('HINCRBY', KEYS[2], '_sum', granted)
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[7])
redis.call('PEXPIRE', KEYS[3], ARGV[7])
return {{1, granted, remaining}}
"""

# Shared head of commit and refund: settle reservation ARGV[1] (KEYS[1] pending hash, KEYS[2] expiry zset).
_SETTLE = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return -1 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local n, created, expires = string.match(v, '^(%d+) (%S+) (%S+)$')
n = tonumber(n)
redis.call('HINCRBY', KEYS[1], '_sum', -n)
"""

# KEYS: pending, pending expiry zset, usage, meter. ARGV: id, now, units (-1: all), pool, usage ttl s, meter ttl s.
# Returns the units counted, or -1 when the reservation was settled already or had lapsed.
COMMIT = (
    _SETTLE
    + f"""
local now = tonumber(ARGV[2])
if tonumber(expires) <= now then return -1 end
local want = tonumber(ARGV[3])
if want >= 0 and want < n then n = want end
if n > 0 then
  local m = string.format('%d', math.floor(tonumber(created) / {BUCKET_SECONDS}))
  if redis.call('HEXISTS', KEYS[3], m) == 0 then
    -- a new bucket: drop aged-out ones, so uncapped subjects (never summed by reserve) stay bounded too
    local oldest = math.floor((now - {BUDGET_WINDOW}) / {BUCKET_SECONDS})
    for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
      if tonumber(f) < oldest then redis.call('HDEL', KEYS[3], f) end
    end
  end
  redis.call('HINCRBY', KEYS[3], m, n)
  redis.call('EXPIRE', KEYS[3], ARGV[5])
end
redis.call('HINCRBY', KEYS[4], ARGV[4] .. ':r', 1)
redis.call('HINCRBY', KEYS[4], ARGV[4] .. ':u', n)
redis.call('EXPIRE', KEYS[4], ARGV[6])
return n
"""
)

REFUND = _SETTLE + "return n"

# KEYS: pending, pending expiry zset. ARGV: id, now, new expiry, key ttl ms. Returns 1 when the reservation was still
# pending (it now expires at ARGV[3]), 0 when it was settled or had lapsed (its units may be someone else's now).
EXTEND = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local n, created, expires = string.match(v, '^(%d+) (%S+) (%S+)$')
if tonumber(expires) <= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], n .. ' ' .. created .. ' ' .. ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
"""

# KEYS: hit log. ARGV: now, limit, window s, member, now - window (computed here: Lua prints only 14 digits).
# Returns {1, count before, oldest} or {0, count, blocking hit}.
HIT = """
local now, limit, w = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[5])
local count = redis.call('ZCARD', KEYS[1])
if count >= limit then
  local t = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
  return {0, count, t[2]}
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil(w * 1000))
return {1, count, redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]}
"""

# KEYS: one day's meter of one subject per record. ARGV: pool and units of each record, then the meter's TTL. One
# reply per subject in a batch of the group commit (a MULTI pipeline would answer every command).
METER = """
local ttl = ARGV[#ARGV]
for i, key in ipairs(KEYS) do
  redis.call('HINCRBY', key, ARGV[2 * i - 1] .. ':r', 1)
  redis.call('HINCRBY', key, ARGV[2 * i - 1] .. ':u', ARGV[2 * i])
  redis.call('EXPIRE', key, ttl)
end
return #KEYS
"""
