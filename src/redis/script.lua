-- tollgate: one token bucket on one key, the model of src/transition.rs.
--
-- Time is Redis `TIME` in microseconds; one microsecond is `per_us` units and one token is a
-- whole number of units, so every quantity is an integer, and the client keeps them all below
-- 2^53, where Lua's doubles are exact. The key holds "<anchor_us> <level>": the bucket held
-- `level` units at `anchor_us`. That is the local bucket's word (the instant, in units, at
-- which the bucket would be empty: anchor_us * per_us - level) split so that no product of an
-- absolute time and a rate is ever formed. An absent key is a full bucket; the key expires
-- when the bucket would be full again.
--
-- KEYS[1]  the bucket
-- ARGV[1]  'take' | 'cancel' | 'peek'
-- ARGV[2]  per_us: units per microsecond
-- ARGV[3]  burst: the capacity in units
-- ARGV[4]  start: the level of an absent key (the burst, or the start fill at first use)
-- ARGV[5]  horizon_us: beyond this many microseconds of elapsed time the bucket is surely full
-- ARGV[6]  '' to read TIME; a time in microseconds for the agreement test alone (no expiry)
-- take:    ARGV[7] cost in units, ARGV[8] the most debt this call may run, in units
-- cancel:  ARGV[7] cost in units, ARGV[8] anchor_us and ARGV[9] level of the reservation
--
-- Returns {1 granted | 0 not, the level in units at now after the call, now in microseconds}.

local key = KEYS[1]
local op = ARGV[1]
local per_us = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local start = tonumber(ARGV[4])
local horizon_us = tonumber(ARGV[5])
-- A clock stepped back by more than the horizon reads as this much debt: it mints nothing.
local deep = 4503599627370496 -- 2^52
-- The deepest debt a reservation may leave, as the client bounds it: stored levels stay above.
local max_debt = 1125899906842624 -- 2^50

local now
local fixed_now = ARGV[6] ~= ''
if fixed_now then
  now = tonumber(ARGV[6])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end

local anchor, stored
local state = redis.call('GET', key)
local absent = not state
if absent then
  anchor, stored = now, start
else
  local sep = string.find(state, ' ', 1, true)
  if sep then
    anchor = tonumber(string.sub(state, 1, sep - 1))
    stored = tonumber(string.sub(state, sep + 1))
  end
  if not anchor or not stored then
    return redis.error_reply('tollgate: the key does not hold a token bucket')
  end
end

-- Units from the instant `a_us, a_level` names to now, bounded so that no product leaves 2^53.
local function since(a_us, a_level)
  local elapsed = now - a_us
  if elapsed > horizon_us then
    return deep
  elseif elapsed < -horizon_us then
    return -deep
  end
  return elapsed * per_us + a_level
end

local level = math.min(since(anchor, stored), burst)

local function store(new_level)
  local missing = burst - new_level
  if missing <= 0 then
    redis.call('DEL', key)
    return
  end
  local value = string.format('%d %d', now, new_level)
  if fixed_now then
    redis.call('SET', key, value)
    return
  end
  -- The key lives until the bucket would be full: never a millisecond less.
  local full_us = math.floor(missing / per_us)
  while full_us * per_us < missing do
    full_us = full_us + 1
  end
  local expire_ms = math.floor((now + full_us) / 1000) + 1
  redis.call('SET', key, value, 'PXAT', string.format('%d', expire_ms))
end

-- A bucket that starts below full is written at its first use, even if that use is denied, so
-- that its start instant does not slide with each call.
local function keep_start()
  if absent and start < burst then
    store(level)
  end
end

if op == 'take' then
  local cost = tonumber(ARGV[7])
  local limit = tonumber(ARGV[8])
  if cost - level <= limit then
    store(level - cost)
    return {1, level - cost, now}
  end
  keep_start()
  return {0, level, now}
elseif op == 'cancel' then
  -- Go's CancelAt: all the tokens back, less those that later reservations counted on, and
  -- none once the reservation is due.
  local cost = tonumber(ARGV[7])
  local due_us = tonumber(ARGV[8])
  local due_level = tonumber(ARGV[9])
  local restore = 0
  -- Below the debt bound only a clock step back can have put the level: give nothing back.
  if level >= -max_debt and since(due_us, due_level) < 0 then
    local overtaken = 0
    local apart_us = anchor - due_us
    if apart_us > horizon_us then
      overtaken = cost
    elseif apart_us >= -horizon_us then
      overtaken = math.max(0, apart_us * per_us - stored + due_level)
    end
    restore = cost - overtaken
  end
  if restore <= 0 then
    keep_start()
    return {0, level, now}
  end
  local new_level = math.min(level + restore, burst)
  store(new_level)
  return {1, new_level, now}
elseif op == 'peek' then
  keep_start()
  return {1, level, now}
end
return redis.error_reply('tollgate: unknown operation')
