// A 2025-11-25 stateful MCP server (sessions) built with the TypeScript SDK v1
// (@modelcontextprotocol/sdk): one StreamableHTTPServerTransport per session.
//
// Run: node server_v1.mjs [--json]  ->  prints "READY <port>" once listening on
// 127.0.0.1, then one JSON line per HTTP exchange ({http, rpc, session, version, status},
// logged when the response finishes or its connection closes: a standalone GET stream
// ends that way) and {"event": "session-closed", ...} when a session ends.
// --json: answer POSTs with JSON bodies instead of event streams (enableJsonResponse).
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

function build() {
    const server = new McpServer({ name: 'ts-sdk-v1-interop', version: '1.0.0' });
    server.registerTool(
        'echo',
        { description: 'Echo the text back.', inputSchema: { text: z.string() } },
        async ({ text }) => ({ content: [{ type: 'text', text }] })
    );
    server.registerTool(
        'add',
        { description: 'Add two integers.', inputSchema: { a: z.number().int(), b: z.number().int() } },
        async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }], structuredContent: { sum: a + b } })
    );
    server.registerTool('fail', { description: 'Always fails.' }, async () => ({
        content: [{ type: 'text', text: 'this tool always fails' }],
        isError: true
    }));
    return server;
}

const sessions = new Map(); // session id -> transport
const jsonResponse = process.argv.includes('--json');

function log(record) {
    process.stdout.write(JSON.stringify(record) + '\n');
}

async function readJson(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const text = Buffer.concat(chunks).toString('utf8');
    return text ? JSON.parse(text) : undefined;
}

function reject(res, status, message) {
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message } }));
}

const http = createServer(async (req, res) => {
    const session = req.headers['mcp-session-id'];
    let body;
    try {
        body = req.method === 'POST' ? await readJson(req) : undefined;
    } catch {
        return reject(res, 400, 'Parse error');
    }
    let logged = false;
    const record = () => {
        if (logged) return;
        logged = true;
        log({
            http: req.method,
            rpc: body?.method ?? null,
            session: session ?? null,
            version: req.headers['mcp-protocol-version'] ?? null,
            status: res.statusCode
        });
    };
    res.on('finish', record);
    res.on('close', record);
    try {
        let transport = session ? sessions.get(session) : undefined;
        if (session && !transport) return reject(res, 404, 'Session not found');
        if (!transport) {
            if (req.method !== 'POST' || !isInitializeRequest(body)) {
                return reject(res, 400, 'No session: send initialize first');
            }
            transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                enableJsonResponse: jsonResponse,
                onsessioninitialized: (id) => sessions.set(id, transport)
            });
            transport.onclose = () => {
                if (transport.sessionId && sessions.delete(transport.sessionId)) {
                    log({ event: 'session-closed', session: transport.sessionId });
                }
            };
            await build().connect(transport);
        }
        await transport.handleRequest(req, res, body);
    } catch (error) {
        if (!res.headersSent) reject(res, 500, String(error));
    }
});

http.listen(0, '127.0.0.1', () => process.stdout.write(`READY ${http.address().port}\n`));
