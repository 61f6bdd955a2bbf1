package redisstate

import "github.com/redis/go-redis/v9"

// The Lua scripts run on the Redis server, so that every instant is read
// from Redis's own clock (TIME) and compared with instants of that clock
// only: a duration that arrives is turned into an expiry in Redis time, and
// an expiry that leaves is turned back into the time left.
//
// Keys, all in one Redis Cluster hash slot (see Store.key):
//
//	open            sorted set: key -> when its open ends (ms, Redis time)
//	hold            sorted set: key -> when its hold ends
//	alive           sorted set: instance -> until when it counts as alive
//	failing:<key>   sorted set: instance -> until when its failure report counts
//	openby:<key>    string: the instance whose open the open set's time is
//	demand          sorted set: "<len(instance)> <instance><key>" -> until when the instance paces the key
//
// Every member is removed once its time has come (ZREMRANGEBYSCORE), and
// every key is given the expiry of its latest member (PEXPIREAT, or PX for
// a string), so nothing stays after the last of its times.

// announceScript records one change and publishes it.
//
//	KEYS: open, hold, alive, failing:<key>, openby:<key>, demand
//	ARGV: kind, instance, key, for (ms), age (ms), channel
//
// It returns {time left (ms), reporters}. The message published is
//
//	"1 <kind> <left ms> <age ms> <reporters> <len(instance)> <instance><key>"
//
// built by concatenation (never string.format, whose %s stops at a zero
// byte), so that any key travels byte for byte.
var announceScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kind, inst, key = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local d, age = tonumber(ARGV[4]), tonumber(ARGV[5])

-- tidy drops the members whose time has come, and lets the set expire
-- with its latest member.
local function tidy(z)
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  if last[2] then redis.call('PEXPIREAT', z, last[2]) end
end

-- keep sets member's time to untl unless a later one is set already: a
-- time is extended, never shortened. It returns the time kept, and
-- whether it is untl.
local function keep(z, member, untl)
  local cur = redis.call('ZSCORE', z, member)
  if cur and tonumber(cur) >= untl then return tonumber(cur), false end
  redis.call('ZADD', z, untl, member)
  return untl, true
end

local left, reporters = d, 0
if kind == 1 then -- alive
  redis.call('ZADD', KEYS[3], now + d, inst)
  tidy(KEYS[3])
elseif kind == 2 then -- failing
  keep(KEYS[4], inst, now + d)
  tidy(KEYS[4])
elseif kind == 3 then -- open: the announcer reports the key failing too
  keep(KEYS[4], inst, now + d)
  tidy(KEYS[4])
  reporters = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf')
  local untl, set = keep(KEYS[1], key, now + d)
  if set and d > 0 then redis.call('SET', KEYS[5], inst, 'PX', d) end
  tidy(KEYS[1])
  left = untl - now
elseif kind == 4 then -- close
  redis.call('ZREM', KEYS[1], key)
  redis.call('DEL', KEYS[5])
  tidy(KEYS[1])
elseif kind == 5 then -- hold
  local untl = keep(KEYS[2], key, now + d)
  tidy(KEYS[2])
  left = untl - now
elseif kind == 6 then -- demand
  redis.call('ZADD', KEYS[6], now + d, #inst .. ' ' .. inst .. key)
  tidy(KEYS[6])
else
  return redis.error_reply('redisstate: unknown kind ' .. tostring(ARGV[1]))
end
redis.call('PUBLISH', ARGV[6], '1 ' .. kind .. ' ' .. left .. ' ' .. age .. ' ' .. reporters .. ' ' .. #inst .. ' ' .. inst .. key)
return {left, reporters}
`)

// snapshotScript returns every live open and hold with its time left,
// every live instance and every live demand, read at one instant of
// Redis's clock.
//
//	KEYS: open, hold, alive, demand
//	ARGV: the prefix of failing:<key>, the prefix of openby:<key>
//
// It returns a flat array of entries of five: kind, instance, key, time
// left (ms), reporters.
var snapshotScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
local function live(z)
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  return redis.call('ZRANGE', z, 0, -1, 'WITHSCORES')
end
local function add(kind, inst, key, left, reporters)
  out[#out + 1] = kind
  out[#out + 1] = inst
  out[#out + 1] = key
  out[#out + 1] = left
  out[#out + 1] = reporters
end
local m = live(KEYS[1])
for i = 1, #m, 2 do
  local key = m[i]
  local reporters = redis.call('ZCOUNT', ARGV[1] .. key, '(' .. now, '+inf')
  local by = redis.call('GET', ARGV[2] .. key) or ''
  add(3, by, key, tonumber(m[i + 1]) - now, reporters)
end
m = live(KEYS[2])
for i = 1, #m, 2 do add(5, '', m[i], tonumber(m[i + 1]) - now, 0) end
m = live(KEYS[3])
for i = 1, #m, 2 do add(1, m[i], '', tonumber(m[i + 1]) - now, 0) end
m = live(KEYS[4])
for i = 1, #m, 2 do
  local sp = string.find(m[i], ' ', 1, true)
  local n = sp and tonumber(string.sub(m[i], 1, sp - 1))
  if n then -- a member of another form is not this store's: skip it
    add(6, string.sub(m[i], sp + 1, sp + n), string.sub(m[i], sp + n + 1), tonumber(m[i + 1]) - now, 0)
  end
end
return out
`)
