-- num: integers handed to redis.call as text. Redis 7.0 turns a Lua number argument
-- into text with snprintf("%.17g"), about 2,000 redis-server instructions each;
-- string.format('%d') of the same integer costs a fraction of that. So the scripts pass
-- integers as strings: literals as '0', computed ones through itoa. (Scores read back
-- from Redis stay numbers or strings as they came.)

-- itoa is integer n as decimal text.
local function itoa(n)
  return string.format('%d', n)
end
