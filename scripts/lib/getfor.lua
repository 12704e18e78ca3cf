-- wrk script for scripts/lib/bench-get-for: every request is the same
-- POST /schema/get_for of a source whose outputs are cached (a cache hit).
function init(args)
  token = args[1]
  body = '{"source": "' .. args[2] .. '"}'
end
function request()
  return wrk.format("POST", "/schema/get_for",
    { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }, body)
end
done = function(summary, latency, requests)
  io.write(string.format("non-2xx or errors: %d\n", summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
  io.write(string.format("latency-us p50 %d p90 %d p99 %d max %d\n", latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
