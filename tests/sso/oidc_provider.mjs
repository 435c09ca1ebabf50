// A real OpenID provider for the single sign-on tests: the certified `oidc-provider` package (npm),
// installed outside the tree (tests/sso/provider.py installs it), run with node.
//
// Environment: OIDC_NODE_MODULES (where oidc-provider is installed), OIDC_PORT, OIDC_PATH (the
// issuer's path, as Keycloak's /realms/NAME), OIDC_CLIENT_ID, OIDC_CLIENT_SECRET,
// OIDC_REDIRECT_URI, OIDC_USERS (JSON: {"name": {"groups": [...], "email": "..."}}).
//
// Its sign-in page is the package's development one (any password; "[ Cancel ]" answers the
// client with error=access_denied). Beside the provider, /control/ lets the test:
//   POST /control/users/NAME  {"groups": [...]}           the user's groups from now on
//   POST /control/tamper      {"aud"|"iss"|"expired"|"foreign_key": ...} or {}: the next ID
//        tokens the token endpoint hands out are re-signed with that change (with the provider's
//        own key unless foreign_key), as a misbehaving or hostile provider would send them
import crypto from 'node:crypto';
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const env = process.env;
const modules = env.OIDC_NODE_MODULES;
const { default: Provider } = await import(
  pathToFileURL(path.join(modules, 'oidc-provider', 'lib', 'index.js')).href
);

const port = Number(env.OIDC_PORT);
const prefix = env.OIDC_PATH || '/realms/agents';
const issuer = `http://localhost:${port}${prefix}`;
const users = JSON.parse(env.OIDC_USERS || '{}');

const KID = 'ledger-test-key';
const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const foreignKey = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
const signingJwk = { ...privateKey.export({ format: 'jwk' }), kid: KID, alg: 'RS256', use: 'sig' };

let tamper = {};

const b64 = (buf) => Buffer.from(buf).toString('base64url');

function resign(idToken) {
  const [header, payload] = idToken.split('.');
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
  const now = Math.floor(Date.now() / 1000);
  if (tamper.aud) claims.aud = tamper.aud;
  if (tamper.iss) claims.iss = tamper.iss;
  if (tamper.expired) {
    claims.iat = now - 3600;
    claims.exp = now - 1800;
  }
  const body = `${header}.${b64(JSON.stringify(claims))}`;
  const key = tamper.foreign_key ? foreignKey : privateKey;
  return `${body}.${b64(crypto.sign('sha256', Buffer.from(body), key))}`;
}

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: env.OIDC_CLIENT_ID,
      client_secret: env.OIDC_CLIENT_SECRET,
      redirect_uris: [env.OIDC_REDIRECT_URI],
      grant_types: ['authorization_code'],
      response_types: ['code'],
    },
  ],
  jwks: { keys: [signingJwk] },
  cookies: { keys: ['ledger-test-cookie-key'] },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username', 'given_name', 'family_name'],
    groups: ['groups'],
  },
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, id) {
    const user = users[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          email: user.email || `${id}@example.com`,
          email_verified: true,
          preferred_username: id,
          name: id,
          groups: user.groups || [],
        };
      },
    };
  },
  // a first-party client: the user's consent is implied (no consent page)
  async loadExistingGrant(ctx) {
    const { client, session } = ctx.oidc;
    const grantId = ctx.oidc.result?.consent?.grantId || session.grantIdFor(client.clientId);
    if (grantId) {
      const found = await ctx.oidc.provider.Grant.find(grantId);
      if (found) return found;
    }
    const grant = new ctx.oidc.provider.Grant({ clientId: client.clientId, accountId: session.accountId });
    grant.addOIDCScope('openid email profile groups');
    await grant.save();
    return grant;
  },
});

provider.use(async (ctx, next) => {
  await next();
  if (ctx.path === '/token' && ctx.body && ctx.body.id_token && Object.keys(tamper).length) {
    ctx.body = { ...ctx.body, id_token: resign(ctx.body.id_token) };
  }
});

const handle = provider.callback();

function readJson(req) {
  return new Promise((resolve, reject) => {
    let data = '';
    req.on('data', (chunk) => { data += chunk; });
    req.on('end', () => {
      try { resolve(data ? JSON.parse(data) : {}); } catch (err) { reject(err); }
    });
  });
}

async function control(req, res) {
  const parts = req.url.split('?')[0].split('/').filter(Boolean); // control, ...
  const body = req.method === 'POST' ? await readJson(req) : {};
  if (parts[1] === 'users' && parts[2]) {
    users[parts[2]] = { ...(users[parts[2]] || {}), ...body };
  } else if (parts[1] === 'tamper') {
    tamper = body;
  } else if (parts[1] !== 'health') {
    res.statusCode = 404;
  }
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ issuer, users, tamper }));
}

http
  .createServer((req, res) => {
    if (req.url.startsWith('/control/')) {
      control(req, res).catch((err) => { res.statusCode = 400; res.end(String(err)); });
      return;
    }
    if (req.url === prefix || req.url.startsWith(`${prefix}/`) || req.url.startsWith(`${prefix}?`)) {
      req.originalUrl = req.url;
      req.url = req.url.slice(prefix.length) || '/';
      handle(req, res);
      return;
    }
    res.statusCode = 404;
    res.end('not here');
  })
  .listen(port, env.OIDC_HOST || '127.0.0.1', () => {
    console.log(`oidc-provider ${issuer} listening`);
  });
