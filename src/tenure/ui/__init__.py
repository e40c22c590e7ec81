"""`tenure ui`: the job browser (issue 24), a Starlette app served by uvicorn.

- :mod:`config`: the frozen config, its defaults and validation;
- :mod:`auth`: who is asking (users file with bcrypt hashes, a trusted proxy header, or nobody),
  their role, and the CSRF token of browser mutations;
- :mod:`filters`: the job filter and paging parameters, from a query string or a JSON body;
- :mod:`service`: the connection pool and the change feed (one LISTEN connection, one owner);
- :mod:`api`: the JSON API under ``{prefix}/api/v1/`` (documented by :mod:`openapi`);
- :mod:`pages`: the HTML pages, which use the API from ``static/app.js``;
- :mod:`app`: the ASGI app: prefix handling, authentication, errors as one JSON message.
"""
