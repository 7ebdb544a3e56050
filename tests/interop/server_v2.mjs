// An MCP server built with the TypeScript SDK v2 (@modelcontextprotocol/server,
// served on node:http by @modelcontextprotocol/node): createMcpHandler serves
// 2026-07-28 (stateless, per-request envelope) and, through its default
// stateless legacy fallback, 2025-era clients too (no sessions).
//
// Run: node server_v2.mjs  ->  prints "READY <port>" once listening on 127.0.0.1,
// then one JSON line per HTTP exchange ({http, rpc, session, version, mcpMethod,
// mcpName, params, status}).
import { createServer } from 'node:http';

import { toNodeHandler } from '@modelcontextprotocol/node';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';

function build() {
    const server = new McpServer({ name: 'ts-sdk-v2-interop', version: '1.0.0' });
    server.registerTool(
        'echo',
        { description: 'Echo the text back.', inputSchema: z.object({ text: z.string() }) },
        async ({ text }) => ({ content: [{ type: 'text', text }] })
    );
    server.registerTool(
        'add',
        { description: 'Add two integers.', inputSchema: z.object({ a: z.number().int(), b: z.number().int() }) },
        async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }], structuredContent: { sum: a + b } })
    );
    server.registerTool('fail', { description: 'Always fails.' }, async () => ({
        content: [{ type: 'text', text: 'this tool always fails' }],
        isError: true
    }));
    // x-mcp-header: a 2026-07-28 client mirrors `region` into Mcp-Param-Region, and
    // this server rejects the call (-32020) unless the header decodes to the body value.
    server.registerTool(
        'route',
        {
            description: 'Route a note to a region.',
            inputSchema: z.object({ region: z.string().meta({ 'x-mcp-header': 'Region' }), note: z.string() })
        },
        async ({ region, note }) => ({ content: [{ type: 'text', text: `${region}|${note}` }] })
    );
    return server;
}

const handler = toNodeHandler(createMcpHandler(() => build(), { legacy: 'stateless' }));

function log(record) {
    process.stdout.write(JSON.stringify(record) + '\n');
}

async function readJson(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const text = Buffer.concat(chunks).toString('utf8');
    return text ? JSON.parse(text) : undefined;
}

const http = createServer(async (req, res) => {
    let body;
    try {
        body = req.method === 'POST' ? await readJson(req) : undefined;
    } catch {
        res.writeHead(400, { 'Content-Type': 'application/json' });
        return res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
    }
    const params = Object.fromEntries(Object.entries(req.headers).filter(([name]) => name.startsWith('mcp-param-')));
    res.on('finish', () =>
        log({
            http: req.method,
            rpc: body?.method ?? null,
            session: req.headers['mcp-session-id'] ?? null,
            version: req.headers['mcp-protocol-version'] ?? null,
            mcpMethod: req.headers['mcp-method'] ?? null,
            mcpName: req.headers['mcp-name'] ?? null,
            params,
            status: res.statusCode
        })
    );
    try {
        await handler(req, res, body);
    } catch (error) {
        if (!res.headersSent) {
            res.writeHead(500, { 'Content-Type': 'application/json' });
            res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32603, message: String(error) } }));
        }
    }
});

http.listen(0, '127.0.0.1', () => process.stdout.write(`READY ${http.address().port}\n`));
