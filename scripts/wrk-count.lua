-- Counts answers by status in each wrk thread, and prints the sums and the run's length.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  ok, refused, other = 0, 0, 0
end

function response(status, headers, body)
  if status == 200 then
    ok = ok + 1
  elseif status == 429 then
    refused = refused + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local o, r, x = 0, 0, 0
  for _, thread in ipairs(threads) do
    o = o + thread:get("ok")
    r = r + thread:get("refused")
    x = x + thread:get("other")
  end
  io.write(string.format("count ok=%d refused=%d other=%d duration_us=%d\n", o, r, x, summary.duration))
end
