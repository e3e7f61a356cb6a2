"""The web chat page served at ``GET /`` (one self-contained HTML file)."""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Ongrid</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body{font-family:system-ui,sans-serif;margin:0;display:flex;flex-direction:column;height:100vh;background:#f6f7f9}
 header{padding:.6em 1em;background:#1f2937;color:#fff;display:flex;gap:1em;align-items:center}
 header input{width:8em}
 #log{flex:1;overflow:auto;padding:1em}
 .msg{max-width:60em;margin:.4em 0;padding:.6em .8em;border-radius:6px;white-space:pre-wrap}
 .user{background:#dbeafe}.bot{background:#fff;border:1px solid #e5e7eb}.interim{color:#555;font-style:italic}
 .err{background:#fee2e2}.tile{font-family:monospace;font-size:.9em;color:#374151}
 form{display:flex;gap:.5em;padding:.6em 1em;background:#fff;border-top:1px solid #e5e7eb}
 form textarea{flex:1;height:3em}
</style></head><body>
<header><b>Ongrid</b><label>thread <input id="thread" value="main"></label>
<label>token <input id="token" type="password"></label><button id="connect">connect</button>
<button id="stop">stop turn</button><span id="status">disconnected</span></header>
<div id="log"></div>
<form id="f"><textarea id="text" placeholder="Ask about your hosts, disks, incidents..."></textarea><button>send</button></form>
<script>
let ws=null, bubble=null; const tiles={};
const log=document.getElementById('log');
function add(cls,text){const d=document.createElement('div');d.className='msg '+cls;d.textContent=text;log.appendChild(d);log.scrollTop=1e9;return d;}
function connect(){
  if(ws) ws.close();
  ws=new WebSocket((location.protocol==='https:'?'wss://':'ws://')+location.host+'/ws');
  ws.onopen=()=>{const h={type:'hello',thread:document.getElementById('thread').value||'main',locale:navigator.language};
    const t=document.getElementById('token').value; if(t) h.token=t; ws.send(JSON.stringify(h));};
  ws.onclose=()=>{document.getElementById('status').textContent='disconnected';};
  ws.onmessage=(ev)=>{const f=JSON.parse(ev.data);
    if(f.type==='session'){document.getElementById('status').textContent=(f.resumed?'resumed ':'new ')+'thread '+f.thread;}
    else if(f.type==='token'){if(!bubble) bubble=add('bot','');bubble.textContent+=f.text;}
    else if(f.type==='interim'){add('interim',f.text);}
    else if(f.type==='agent_tile'){let d=tiles[f.task_id]; if(!d){d=add('tile','');tiles[f.task_id]=d;}
      d.textContent='['+f.status+'] '+f.subagent_type+': '+f.description;}
    else if(f.type==='tool'){add('tile','tool '+f.name+' '+f.status);}
    else if(f.type==='final'){if(!bubble) add('bot',f.text); else bubble.textContent=f.text; bubble=null;}
    else if(f.type==='error'){add('err',f.code+': '+f.message);bubble=null;}
  };
}
document.getElementById('connect').onclick=connect;
document.getElementById('stop').onclick=()=>{if(ws) ws.send(JSON.stringify({type:'stop'}));};
document.getElementById('f').onsubmit=(e)=>{e.preventDefault();const t=document.getElementById('text');
  if(!t.value.trim()||!ws) return; add('user',t.value); bubble=null; ws.send(JSON.stringify({type:'user_message',text:t.value})); t.value='';};
connect();
</script></body></html>
"""
