-- libflux from LuaJIT's FFI, with nothing but build/include/flux_cdef.h
-- (`make cdef`) and the library: the header's declarations go to ffi.cdef()
-- as they are. Facebook's flight-destination example, a wait_for chain, and
-- the error values (token and cycle) a binding reads instead of the message.
-- Usage: luajit flight.lua FLUX_CDEF_H LIBFLUX_SO; prints TAP and a count.
local ffi = require("ffi")
local cdef_path, lib_path = arg[1], arg[2]

local passed, failed, n = 0, 0, 0
local function ok(cond, what)
  n = n + 1
  if cond then passed = passed + 1; print("ok " .. n .. " - " .. what)
  else failed = failed + 1; print("not ok " .. n .. " - " .. what) end
end

local f = assert(io.open(cdef_path))
local declarations = f:read("*a")
f:close()
ok(pcall(ffi.cdef, declarations), "ffi.cdef() takes flux_cdef.h as it is")
local flux = ffi.load(lib_path)
ok(flux.flux_version() == flux.FLUX_VERSION_NUMBER,
   "flux_version() == FLUX_VERSION_NUMBER, the header's constant, usable from Lua")

-- The example: a payload is a C string, the action's name.
local d = flux.flux_dispatcher_create()
ok(d ~= nil, "flux_dispatcher_create")
local log = {}
local tokens = {}
local callbacks = {}  -- anchored: a collected ffi callback would dangle
local function register(name, body)
  local cb = ffi.cast("flux_callback", function(context, payload)
    -- Nothing may unwind through libflux (flux.h, "Returning"): catch here.
    local fine, result = pcall(body, ffi.string(ffi.cast("const char *", payload)))
    if not fine then log[#log + 1] = "error: " .. tostring(result); return 1 end
    return result or 0
  end)
  callbacks[#callbacks + 1] = cb
  local out = ffi.new("flux_token[1]")
  local status = flux.flux_register(d, cb, nil, nil, out)
  assert(status == flux.FLUX_OK, ffi.string(flux.flux_last_error()))
  tokens[name] = out[0]
  return out[0]
end
local function wait(name)
  local t = ffi.new("flux_token[1]", tokens[name])
  return flux.flux_wait_for(d, t, 1)
end

register("flight-price", function(action)
  if action == "city-update" then
    assert(wait("city") == flux.FLUX_OK)
    log[#log + 1] = "price for the new city"
  end
end)
register("city", function(action)
  if action == "city-update" then
    assert(wait("country") == flux.FLUX_OK)
    log[#log + 1] = "city of the new country"
  end
end)
register("country", function(action)
  if action == "city-update" then log[#log + 1] = "country updated" end
end)

local payload = ffi.new("char[?]", #"city-update" + 1, "city-update")
ok(flux.flux_dispatch(d, payload) == flux.FLUX_OK, "flux_dispatch of the flight example")
ok(table.concat(log, "; ") == "country updated; city of the new country; price for the new city",
   "each store ran once, after the ones it waits for: " .. table.concat(log, "; "))

-- A cycle: flight-price waits for city, city waits for flight-price.
local cyclic = flux.flux_dispatcher_create()
local cycle_tokens = {}
local cycle_status, cycle_count, cycle_values, error_token
local function register_cyclic(body)
  local cb = ffi.cast("flux_callback", function(context, payload)
    local fine, result = pcall(body)
    if not fine then return 1 end
    return result or 0
  end)
  callbacks[#callbacks + 1] = cb
  local out = ffi.new("flux_token[1]")
  assert(flux.flux_register(cyclic, cb, nil, nil, out) == flux.FLUX_OK)
  cycle_tokens[#cycle_tokens + 1] = out[0]
end
register_cyclic(function()
  local t = ffi.new("flux_token[1]", cycle_tokens[2])
  return flux.flux_wait_for(cyclic, t, 1) == flux.FLUX_OK and 0 or 1
end)
register_cyclic(function()
  local t = ffi.new("flux_token[1]", cycle_tokens[1])
  cycle_status = flux.flux_wait_for(cyclic, t, 1)
  error_token = flux.flux_last_error_token()
  local values = ffi.new("flux_token[8]")
  cycle_count = tonumber(flux.flux_last_error_cycle(values, 8))
  cycle_values = {}
  for i = 0, math.min(cycle_count, 8) - 1 do cycle_values[#cycle_values + 1] = tonumber(values[i]) end
  return 1
end)
ok(flux.flux_dispatch(cyclic, nil) == flux.FLUX_ERR_CALLBACK_FAILED, "the cyclic dispatch fails")
ok(cycle_status == flux.FLUX_ERR_CIRCULAR, "the closing wait_for returns FLUX_ERR_CIRCULAR")
ok(error_token == cycle_tokens[1], "flux_last_error_token() is the token waited for")
local first, second = tonumber(cycle_tokens[1]), tonumber(cycle_tokens[2])
ok(cycle_count == 3 and cycle_values[1] == second and cycle_values[2] == first and cycle_values[3] == second,
   "flux_last_error_cycle() is waiter, target, back to the waiter: " .. table.concat(cycle_values or {}, " "))

-- An unknown token, outside and inside a dispatch.
ok(flux.flux_unregister(d, 999) == flux.FLUX_ERR_UNKNOWN_TOKEN and flux.flux_last_error_token() == 999,
   "flux_unregister of an unknown token: FLUX_ERR_UNKNOWN_TOKEN, and the token as a value")

ok(flux.flux_dispatcher_destroy(cyclic) == flux.FLUX_OK, "flux_dispatcher_destroy")
ok(flux.flux_dispatcher_destroy(d) == flux.FLUX_OK, "flux_dispatcher_destroy")
for _, cb in ipairs(callbacks) do cb:free() end

print(passed .. " passed, " .. failed .. " failed")
os.exit(failed == 0 and 0 or 1)
