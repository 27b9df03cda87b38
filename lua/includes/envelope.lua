-- envelope: what the scripts read of an envelope, the one place Lua knows its binary
-- format (internal/envelope is the Go side): a version byte (2), a flags byte, then the
-- route as a uvarint length + bytes, then fields the scripts never read. An envelope
-- that is missing or of an unknown version has route "".

-- uvarint reads an unsigned varint (7 bits a byte, low first) at pos of s: the value and
-- the position after it, or nil when s ends first.
local function uvarint(s, pos)
  local v, mul = 0, 1
  while true do
    local b = string.byte(s, pos)
    if not b then
      return nil, pos
    end
    pos = pos + 1
    if b < 128 then
      return v + b * mul, pos
    end
    v = v + (b - 128) * mul
    mul = mul * 128
  end
end

-- routeOf is the route of an envelope.
local function routeOf(env)
  if not env or string.byte(env, 1) ~= 2 then
    return ''
  end
  local n, pos = uvarint(env, 3)
  if not n then
    return ''
  end
  return string.sub(env, pos, pos + n - 1)
end

