import json,glob,sys
pat=sys.argv[1]  # e.g. 'ab-*' in this folder
rows={}
for d in sorted(glob.glob(pat)):
    try: j=json.load(open(d+'/results.json'))
    except Exception: continue
    v=d.split('/')[-1]
    for c in j['cells']:
        r=c['receiver']; t=r['cpu_data_threads']
        b=sum(r['bytes'].values())
        print(v, c['connections'], 'Mbit/s=%d c/B_sys=%.2f c/B_recv=%.2f user_ns/KB=%.0f sys_ns/KB=%.0f retr=%d'%(c['mbit_s'],c['cycles_per_byte_system'],c['cycles_per_byte_receiver'],t['user_s']*1e12/b, t['system_s']*1e12/b, c['retrans_sender']))
