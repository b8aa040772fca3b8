-- wrk script: POST a batch submit of SIZE tasks on every request (keep-alive), each item
-- under a key no other request uses.  wrk -s batch.lua URL -- SIZE NONCE
local threads = {}

function setup(thread)
   thread:set("id", #threads)
   table.insert(threads, thread)
end

function init(args)
   size = tonumber(args[1]) or 100
   prefix = "b" .. (args[2] or "0") .. "-" .. id .. "-"
   counter = 0
   task = '{"tenantId":"bench","projectId":"bench","queue":"bench","title":"bench",' ..
          '"payload":{"prompt":"benchmark prompt"}}'
end

function request()
   local parts = {}
   for i = 1, size do
      counter = counter + 1
      parts[i] = '{"idempotencyKey":"' .. prefix .. counter .. '","task":' .. task .. '}'
   end
   -- wrk.headers carries the -H options (the admin key); a table given to wrk.format
   -- replaces them, so they are copied into it
   local headers = {["Content-Type"] = "application/json"}
   for name, value in pairs(wrk.headers) do headers[name] = value end
   return wrk.format("POST", nil, headers, '{"items":[' .. table.concat(parts, ",") .. ']}')
end
