// One websocket per page; pages subscribe to the live groups they show.
// Reconnects with backoff; the badge #live-state (if present) shows the connection.
(function () {
  const handlers = {};
  let socket = null;
  let delay = 1000;
  function badge(text, cls) {
    const el = document.getElementById("live-state");
    if (el) { el.textContent = text; el.className = "badge " + (cls || ""); }
  }
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/live/");
    socket.onopen = function () {
      delay = 1000;
      badge("live", "ok");
      Object.keys(handlers).forEach(function (g) { socket.send(JSON.stringify({subscribe: g})); });
    };
    socket.onmessage = function (msg) {
      const data = JSON.parse(msg.data);
      if (data.subscribed) { document.body.dataset["live_" + data.subscribed] = "1"; return; }
      (handlers[data.group] || []).forEach(function (fn) { fn(data.event, data.payload); });
    };
    socket.onclose = function () {
      badge("reconnecting", "bad");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  window.AuditorLive = {
    subscribe: function (group, fn) {
      (handlers[group] = handlers[group] || []).push(fn);
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({subscribe: group}));
    },
  };
  connect();
})();
