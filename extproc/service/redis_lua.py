"""Server-side Lua scripts of the shared ratio store (:mod:`extproc.service.redis_store`).

``EMA_BATCH_LUA`` applies a batch of observations with the same learner as
:func:`extproc.core.estimate.calibration.learn`; ``SEED_LUA`` re-seeds a data set that Redis lost from one
replica's local states. Both run atomically on the server (EVALSHA, reloaded after a restart).
"""

from __future__ import annotations

__all__ = ["EMA_BATCH_LUA", "SEED_LUA"]

EMA_BATCH_LUA = """
-- Server-side twin of extproc.core.estimate.calibration.learn (weighted EMA of the ratio and its absolute
-- deviation, SGD tracker of the low log-residual quantile).
-- KEYS[1]: marker of this batch (idempotent retries); KEYS[2]: ratios hash; KEYS[3]: version
-- (set to KEYS[1], a value never used before, so a replica's last seen version never repeats);
-- KEYS[4]: epoch of the data set (set once, to KEYS[1], when absent: a new data set).
-- ARGV[1..5]: beta, quantile, quantile_step, initial_margin, initial_rel_dev; ARGV[6]: marker TTL;
-- then per observation i = 1..n: ARGV[3i+4] field, ARGV[3i+5] model-to-true ratio, ARGV[3i+6] weight.
-- Applied in order, atomically, at most once per batch id.
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', tonumber(ARGV[6])) then
  return 0
end
local beta, qa, qstep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local margin, rel = tonumber(ARGV[4]), tonumber(ARGV[5])
local n_obs = (#ARGV - 6) / 3
for i = 1, n_obs do
  local field = ARGV[3 * i + 4]
  local c = tonumber(ARGV[3 * i + 5])
  local w = tonumber(ARGV[3 * i + 6])
  local mean, dev, n, low = nil, nil, nil, nil
  local v = redis.call('HGET', KEYS[2], field)
  if v then
    local a, b, k, l = string.match(v, '^(%S+) (%S+) (%S+) (%S+)$')
    mean, dev, n, low = tonumber(a), tonumber(b), tonumber(k), tonumber(l)
  end
  if mean == nil or dev == nil or n == nil or n < 1 then
    mean, dev, n, low = c, c * rel, 1, c * (1 - margin)
  else
    local mean0 = mean
    local step = (1 - beta) * w
    mean = mean0 + step * (c - mean0)
    dev = dev + step * (math.abs(c - mean0) - dev)
    local q
    if low ~= nil and low > 0 then q = math.log(low / mean0) else q = math.log(1 - margin) end
    local below = 0
    if math.log(c / mean0) < q then below = 1 end
    q = q + qstep * w * (qa - below)
    if q > 0 then q = 0 end
    n = n + 1
    low = mean * math.exp(q)
  end
  redis.call('HSET', KEYS[2], field, string.format('%.17g %.17g %d %.17g', mean, dev, n, low))
end
redis.call('SET', KEYS[3], KEYS[1])
redis.call('SET', KEYS[4], KEYS[1], 'NX')
return n_obs
"""

SEED_LUA = """
-- Re-seed a shared hash that lost its data (new epoch) from one replica's local states.
-- KEYS[1]: ratios hash; KEYS[2]: version; KEYS[3]: epoch; ARGV[1]: a new unique token;
-- then field, value pairs. A field is written when absent or when the shared state has fewer
-- samples (a replica that restarted with the server must not reset the others' learning).
-- Returns {epoch, written fields...}.
local written = {}
for i = 2, #ARGV, 2 do
  local ours = tonumber(string.match(ARGV[i + 1], '^%S+ %S+ (%S+) '))
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  local theirs = nil
  if cur then theirs = tonumber(string.match(cur, '^%S+ %S+ (%S+) ')) end
  if theirs == nil or (ours ~= nil and theirs < ours) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    written[#written + 1] = ARGV[i]
  end
end
redis.call('SET', KEYS[3], ARGV[1], 'NX')
if #written > 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], ARGV[1])
end
local out = {redis.call('GET', KEYS[3])}
for _, f in ipairs(written) do out[#out + 1] = f end
return out
"""
