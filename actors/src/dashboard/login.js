'use strict';
// Redeems the one-time code in this page's fragment (never sent to a server, so never logged) for a
// session cookie, then opens the dashboard.
(async () => {
  const status = document.getElementById('status');
  const code = location.hash.slice(1);
  history.replaceState(null, '', '/login');
  if (!code) {
    status.textContent = 'This link has no login code.';
    return;
  }
  try {
    const answer = await fetch('/login', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-gangway-csrf': '1' },
      body: JSON.stringify({ code }),
    });
    if (answer.ok) {
      location.replace('/');
      return;
    }
    const body = await answer.json().catch(() => ({}));
    status.textContent = body.error || `The daemon refused the login (${answer.status}).`;
  } catch (e) {
    status.textContent = `The daemon did not answer: ${e.message}`;
  }
})();
