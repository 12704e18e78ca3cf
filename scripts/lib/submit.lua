-- wrk script for scripts/lib/bench-submit: each request submits examples/demo.json
-- to a fresh deployment id (PUT /deployments/b<thread>-<n>), as a front-end would.
local counter = 0
local thread_id = 0
function setup(thread)
  thread:set("id", thread_id)
  thread_id = thread_id + 1
end
function init(args)
  token = args[1]
  local f = assert(io.open(args[2], "r"))
  body = '{"configuration": ' .. f:read("*a") .. '}'
  f:close()
end
function request()
  counter = counter + 1
  return wrk.format("PUT", "/deployments/b" .. id .. "-" .. counter,
    { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }, body)
end
done = function(summary, latency, requests)
  io.write(string.format("non-2xx or errors: %d\n", summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
