-- wrk script: POST a task submit on every request (keep-alive).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"tenantId":"bench","projectId":"bench","queue":"bench","title":"bench",' ..
           '"payload":{"prompt":"benchmark prompt"}}'
