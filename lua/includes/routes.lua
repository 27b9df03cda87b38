-- routes: the helper shared by park, bury and cancel.
--
-- A route list (the value of the cancelled hash) is a concatenation of
-- "<length>:<route>" entries, exact for any bytes. hasRoute reports whether list holds
-- route.
local function hasRoute(list, route)
  local i = 1
  while i <= #list do
    local c = string.find(list, ':', i, true)
    if not c then
      return false
    end
    local n = tonumber(string.sub(list, i, c - 1)) or 0
    if string.sub(list, c + 1, c + n) == route then
      return true
    end
    i = c + n + 1
  end
  return false
end
