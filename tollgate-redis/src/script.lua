-- tollgate: one token bucket on one key, the model of src/transition.rs.
--
-- Time is Redis `TIME` in microseconds; one microsecond is `per_us` units and one token is a
-- whole number of units. The bucket is the local bucket's word: `z`, the instant at which it
-- would be empty. An instant is a pair {us, frac}: `us` microseconds and `frac` units more,
-- 0 <= frac < per_us. Pairs are only added, subtracted and compared, so no product of a time
-- and a rate is ever formed and every number stays far below 2^53, where Lua's doubles are
-- exact: reservations may run decades into debt at any rate.
--
-- The key holds "<z_us> <z_frac> <written_us> <epoch>": the empty instant, when it was written
-- (a clock stepped back is measured from there, so that it credits nothing and locks nothing)
-- and the instant the key was created (a cancel made for an older incarnation of the key, one
-- deleted, flushed or lost in a restart, gives nothing back). An absent key is a full bucket;
-- the key expires when the bucket would be full again. A value that is not such a bucket (written
-- by someone else, truncated, beyond the debt bound) reads as absent and is replaced.
--
-- KEYS[1]  the bucket
-- ARGV[1]  'take' | 'cancel' | 'refund' | 'peek'
-- ARGV[2]  per_us: units per microsecond
-- ARGV[3..4]   ceiling: the most the bucket holds (the burst and less than a step), a pair
-- ARGV[5..6]   start: the level of an absent key, as a pair (the ceiling, or the start fill)
-- ARGV[7..8]   the deepest debt, as a pair
-- ARGV[9]  deadline_us: past this Redis time the call acts on nothing ('' for none)
-- ARGV[10] '' to read TIME; a time in microseconds for the crate's own agreement tests
-- ARGV[11..12] charge: units granted elsewhere while Redis was unreachable, taken first
-- take:    ARGV[13..14] cost, ARGV[15..16] the most debt this call may run
-- cancel, refund:  ARGV[13..14] cost, ARGV[15..16] the reservation's due instant, ARGV[17]
--          its epoch
--
-- Returns {status, debt_us, debt_frac, now_us, epoch}: status 1 granted (or the epoch matches),
-- 0 not, -1 too late (nothing done); the debt (z - now, a pair, negative when tokens are left)
-- after the call.

local key = KEYS[1]
local op = ARGV[1]
local per_us = tonumber(ARGV[2])

local function pair(i)
  return {tonumber(ARGV[i]), tonumber(ARGV[i + 1])}
end

local function add(a, b)
  local us, frac = a[1] + b[1], a[2] + b[2]
  if frac >= per_us then
    us, frac = us + 1, frac - per_us
  end
  return {us, frac}
end

local function sub(a, b)
  local us, frac = a[1] - b[1], a[2] - b[2]
  if frac < 0 then
    us, frac = us - 1, frac + per_us
  end
  return {us, frac}
end

local function less(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end

local burst = pair(3)
local start = pair(5)
local max_debt = pair(7)
local charge = pair(11)

-- Runs a command as redis.call does, except that a refusal by the user's ACL names the
-- command, which Redis's own message for a script does not.
local function call(command, ...)
  local answer = redis.pcall(command, ...)
  if type(answer) == 'table' and answer.err then
    if string.find(answer.err, "can't run this command", 1, true) then
      error({err = "NOPERM this user has no permissions to run the '" .. string.lower(command)
        .. "' command in the rate limit script"})
    end
    error(answer)
  end
  return answer
end

local now
local fixed_now = ARGV[10] ~= ''
if fixed_now then
  now = tonumber(ARGV[10])
else
  local time = call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
-- A call that Redis runs after its caller gave up (queued behind a stall, say) does nothing.
if ARGV[9] ~= '' and now > tonumber(ARGV[9]) then
  return {-1, 0, 0, now, 0}
end
local now_pair = {now, 0}
local floor = sub(now_pair, burst) -- z never lies below: the bucket holds at most the ceiling

-- A whole number that a double holds exactly (nil, nan and inf are not).
local function whole(x)
  return x ~= nil and x == x and x == math.floor(x) and x > -2^53 and x < 2^53
end

local z, epoch
local dirty = false -- the key must be written (or deleted) whatever the operation decides
local state = call('GET', key)
local absent = not state
if state then
  local f = {}
  for field in string.gmatch(state, '%S+') do
    f[#f + 1] = tonumber(field)
  end
  local z_us, z_frac, written, stamp = f[1], f[2], f[3], f[4]
  if #f == 4 and whole(z_us) and whole(z_frac) and whole(written) and whole(stamp)
      and z_frac >= 0 and z_frac < per_us then
    z, epoch = {z_us, z_frac}, stamp
    if written > now then
      -- The clock stepped back: the bucket keeps the level it had when written.
      z = sub(z, {written - now, 0})
      dirty = true
    end
    if less(add(now_pair, max_debt), z) then
      z = nil -- deeper than any reservation can run: not ours
    end
  end
  if not z then
    -- Not a bucket: heal it as a full one, written again or deleted below.
    absent, dirty = true, true
    start = burst
  end
end
if absent then
  z, epoch = sub(now_pair, start), now
end
if less(z, floor) then
  z = floor
end
if charge[1] > 0 or charge[2] > 0 then
  z = add(z, charge)
  local deepest = add(now_pair, max_debt)
  if less(deepest, z) then
    z = deepest
  end
  dirty = true
end

local function reply(status)
  local debt = sub(z, now_pair)
  return {status, debt[1], debt[2], now, epoch}
end

local function store()
  if not less(floor, z) then
    if not absent or dirty then
      call('DEL', key)
    end
    return
  end
  local value = string.format('%d %d %d %d', z[1], z[2], now, epoch)
  if fixed_now then
    call('SET', key, value)
    return
  end
  -- The key lives until the bucket would be full: never a millisecond less.
  local full = add(z, burst)
  local full_us = full[1]
  if full[2] > 0 then
    full_us = full_us + 1
  end
  call('SET', key, value, 'PXAT', string.format('%d', math.floor(full_us / 1000) + 1))
end

-- Writes what changed. A bucket that starts below full is written at its first use, even if
-- that use is denied, so that its start instant does not slide with each call.
local function keep()
  if dirty or (absent and less(floor, z)) then
    store()
  end
end

-- Gives `units` back, never past the floor (the bucket full), writes and answers a grant.
local function give_back(units)
  z = sub(z, units)
  if less(z, floor) then
    z = floor
  end
  store()
  return reply(1)
end

if op == 'take' then
  local after = add(z, pair(13))
  if not less(pair(15), sub(after, now_pair)) then
    z = after
    store()
    return reply(1)
  end
  keep()
  return reply(0)
elseif op == 'cancel' then
  -- The local bucket's cancel (`Layout::give_back`): all the tokens back while the reservation
  -- is not due and nothing came after it (the bucket still ends where it left it); nothing
  -- once it is due, once anything moved the bucket since, nor into another incarnation of the
  -- key.
  local cost, due = pair(13), pair(15)
  if absent or epoch ~= tonumber(ARGV[17]) or not less(now_pair, due)
      or less(z, due) or less(due, z) then
    keep()
    return reply(0)
  end
  return give_back(cost)
elseif op == 'refund' then
  -- A take its caller will not act on after all (a wait dropped during its jitter), due or
  -- not: the local bucket's refund (`Layout::refund`). All the tokens back, less what the cap
  -- would have cut since they were due; nothing while a later reservation holds the bucket in
  -- debt, nor into another incarnation of the key.
  local cost, due = pair(13), pair(15)
  local overtaken = (z[1] ~= due[1] or z[2] ~= due[2]) and less(now_pair, z)
  if absent or epoch ~= tonumber(ARGV[17]) or overtaken then
    keep()
    return reply(0)
  end
  local headroom = sub(burst, sub(now_pair, due))
  local restore = cost
  if less(headroom, restore) then
    restore = headroom
  end
  if not less({0, 0}, restore) or not less(floor, z) then
    keep()
    return reply(0)
  end
  return give_back(restore)
elseif op == 'peek' then
  keep()
  return reply(1)
end
return redis.error_reply('tollgate: unknown operation')
