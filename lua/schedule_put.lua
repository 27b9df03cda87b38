-- schedule_put: create or replace a recurring schedule's definition.
--
-- KEYS[1] schedules      the definitions HASH (id -> "<gen>:<updated>:<definition>")
-- KEYS[2] schedules:gen  the generations HASH (id -> last generation; never deleted)
-- ARGV[1] schedule id
-- ARGV[2] now (unix ms)
-- ARGV[3] the definition (opaque bytes)
-- Returns the new generation: one more than any earlier generation of the id, also
-- across a delete.
local gen = redis.call('HINCRBY', KEYS[2], ARGV[1], '1')
redis.call('HSET', KEYS[1], ARGV[1], table.concat({gen, ARGV[2], ARGV[3]}, ':'))
return gen
